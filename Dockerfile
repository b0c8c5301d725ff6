# syntax=docker/dockerfile:1
#
# The operator's image. It runs the operator and, with the `proxy`
# subcommand, the kubernetes provider's proxy pods.
#
#   make docker-build IMG=registry.example.com/egress-proxies-operator:v0.1.0
#
# Needs a Docker (BuildKit) engine and access to the base images' registries.

# The builder runs on the build machine's platform and cross-compiles for the
# target one (no emulation needed for multi-platform builds).
FROM --platform=$BUILDPLATFORM golang:1.26 AS builder
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=dev

WORKDIR /workspace
# Module downloads are cached in their own layer, invalidated only by go.mod
# and go.sum.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download

# Only what the binary is built from (see also .dockerignore).
COPY api/ api/
COPY cmd/ cmd/
COPY internal/ internal/

# Static binary: no cgo, so it runs on distroless/static. -trimpath and
# -s -w keep build paths and debug symbols out of the image.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" \
      -o /out/egress-proxies-operator ./cmd/egress-proxies-operator

# No shell, no package manager; nonroot is UID and GID 65532, as the
# Deployment and the proxy pods require (runAsNonRoot with a numeric user).
FROM gcr.io/distroless/static:nonroot
LABEL org.opencontainers.image.title="egress-proxies-operator" \
      org.opencontainers.image.source="https://github.com/egress-proxies/egress-proxies-operator"
WORKDIR /
COPY --from=builder /out/egress-proxies-operator /egress-proxies-operator
USER 65532:65532
ENTRYPOINT ["/egress-proxies-operator"]
