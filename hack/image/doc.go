// Command image builds the operator's container image without a Docker
// engine and writes it as a docker-format tarball, or pushes it to a
// registry. It is what `make image`, `make image-push` and the cluster test
// tier (internal/testing/kubelab) use, so the image the tests run is the
// image users get.
//
//	go run ./hack/image build --binary bin/linux-amd64/egress-proxies-operator --tag egress-proxies-operator:dev --out bin/image.tar
//	go run ./hack/image push --tarball bin/image.tar --image registry.example.com/egress/egress-proxies-operator:v0.1.0
//
// The image is FROM scratch with one layer holding the static binary at
// /<name>, mode 0755, owned by root; it runs as 65532:65532 with the binary
// as its entrypoint. The same code builds the pause image of the test
// cluster (internal/testing/kubelab) from hack/pause. Timestamps are fixed,
// so the same binary gives the same image digest.
//
// `docker load -i` and `ctr -n k8s.io images import` both read the tarball.
package main
