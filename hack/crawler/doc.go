// Command crawler is the cluster tier's crawler (internal/e2e/cluster): a
// pod that fetches a URL through a proxy, as a crawler in the cluster
// would, and says what each request got. The proxy URL, credentials
// included, comes from the environment (PROXY_URL, from a Proxy's Secret
// key url); the crawler never prints it, only its host. Built static and
// put in a one-layer image by hack/image (`make crawler-image`), so that
// the test cluster needs no registry.
package main
