package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// The kubernetes provider's entry in the bench: one zone without a node
// selector (envtest has no nodes), one machine type, the operator's image.
const (
	kubernetesEntry       = "cluster"
	kubernetesZone        = "default"
	kubernetesMachineType = "tiny"
	kubernetesImage       = "default"
)

// kubernetesProvidersYAML is the providers configuration of the kubernetes
// run: pods in podNS, createCap creates at once (0: the default).
func kubernetesProvidersYAML(podNS string, createCap int) string {
	limit := ""
	if createCap > 0 {
		limit = fmt.Sprintf("\n    maxConcurrentCreates: %d", createCap)
	}
	return fmt.Sprintf(`
providers:
  - name: %s
    type: kubernetes%s
    zones: [%s]
    machineTypes: {%s: {cores: 1, memoryMiB: 64}}
    images: [%s]
    kubernetes:
      namespace: %s
`, kubernetesEntry, limit, kubernetesZone, kubernetesMachineType, kubernetesImage, podNS)
}

// startKubelet plays the kubelet for the pods of ns, as the kubernetes
// provider's tests do: every new pod runs at once, is Ready and has an
// address in 198.51.100.0/24 (TEST-NET-2, never dialled). It watches, so a
// pod is marked as soon as it exists; stop ends it and waits.
func startKubelet(ctx context.Context, c client.WithWatch, ns string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		next := 0
		for ctx.Err() == nil {
			w, err := c.Watch(ctx, &corev1.PodList{}, client.InNamespace(ns))
			if err != nil {
				fmt.Fprintln(os.Stderr, "bench kubelet: watch:", err)
				return
			}
			for ev := range w.ResultChan() {
				pod, ok := ev.Object.(*corev1.Pod)
				if !ok || ev.Type != watch.Added || pod.Status.Phase == corev1.PodRunning {
					continue
				}
				next++
				addr := netip.AddrFrom4([4]byte{198, 51, 100, byte(1 + next%254)})
				pod.Status.Phase = corev1.PodRunning
				pod.Status.PodIP, pod.Status.HostIP = addr.String(), "203.0.113.1"
				pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
				if err := c.Status().Update(ctx, pod); err != nil && ctx.Err() == nil {
					fmt.Fprintln(os.Stderr, "bench kubelet:", err)
				}
			}
			w.Stop()
		}
	})
	return func() {
		cancel()
		wg.Wait()
	}
}
