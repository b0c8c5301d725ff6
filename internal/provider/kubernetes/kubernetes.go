package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/egress-proxies/egress-proxies-operator/internal/config"
	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// Labels and annotations that make up the operator's mark on a pod. The
// installation is a label, so that listings select only this
// installation's pods; the signature (ownership.Identity.Sign of MarkOf) is
// an annotation and covers every other part.
const (
	LabelManagedBy      = "app.kubernetes.io/managed-by"
	LabelManagedByValue = "egress-proxies-operator"
	LabelName           = "app.kubernetes.io/name"
	LabelNameValue      = "egress-proxy"
	LabelProvider       = "crawl.example.com/provider"
	LabelOwnerUID       = "crawl.example.com/owner-uid"
	LabelInstallation   = "crawl.example.com/installation"
	AnnotationOwner     = "crawl.example.com/owner"
	AnnotationName      = "crawl.example.com/instance-name"
	AnnotationCreatedAt = "crawl.example.com/created-at"
	AnnotationSignature = "crawl.example.com/mark-signature"
)

// Paths and names inside the pod.
const (
	containerName      = "proxy"
	credentialsVolume  = "credentials"
	credentialsMount   = "/etc/egress-proxy/credentials" //nolint:gosec // G101: a mount path, not a credential.
	nonRootUID         = 65532
	secretKeyUsername  = "username"
	secretKeyPassword  = "password"
	credentialsSuffix  = "-credentials"
	privilegedPortsEnd = 1024
)

// +kubebuilder:rbac:groups="",namespace=egress-proxies,resources=pods,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",namespace=egress-proxies,resources=secrets,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// The Proxy's credentials Secret, read by name in the Proxy's namespace (one
// the operator serves) to copy it next to the pod.
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get,roleName=namespace-role
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get

// Provider runs proxies as pods.
type Provider struct {
	ident  *ownership.Identity
	entry  *config.Entry
	block  *Block
	c      client.Client
	api    client.Reader
	image  string
	now    func() time.Time
	labels map[string]string

	// unverified are the pods the latest ListByTag saw with this
	// installation's mark and a signature that does not verify.
	mu         sync.Mutex
	unverified []provider.Instance
}

var (
	_ provider.Provider         = (*Provider)(nil)
	_ provider.Checker          = (*Provider)(nil)
	_ provider.UnverifiedLister = (*Provider)(nil)
)

// New returns the provider of one kubernetes entry, whose Block is a
// *Block. It contacts nothing. Of d it uses Ownership (required: it signs
// and verifies the pods' marks), Client (pods and the operator's Secrets,
// read from the manager's cache, written through the API server),
// APIReader (nodes and namespaces for the health check, confirmations
// after a conflict), both required, OwnImage (the container image when the
// block names none) and the clock.
func New(e *config.Entry, d provider.Deps) (*Provider, error) {
	block, err := provider.BlockOf[Block]("kubernetes provider", e, d)
	if err != nil {
		return nil, err
	}
	if d.Client == nil || d.APIReader == nil {
		return nil, fmt.Errorf("kubernetes provider %q: a client and an API reader are required", e.Name)
	}
	for _, img := range e.Images {
		if block.ImageFor(img) == "" && d.OwnImage == "" {
			return nil, fmt.Errorf("image %q has no container image: set kubernetes.image or kubernetes.images[%s], "+
				"or run the operator with --proxy-image (its own image)", img, img)
		}
	}
	return &Provider{
		ident: d.Ownership, entry: e, block: block, c: d.Client, api: d.APIReader, image: d.OwnImage, now: d.Clock(),
		labels: map[string]string{LabelManagedBy: LabelManagedByValue, LabelProvider: e.Name, LabelInstallation: d.Ownership.Installation()},
	}, nil
}

// ID returns the instance ID of a pod: namespace/name.
func ID(namespace, name string) provider.ID { return provider.ID(namespace + "/" + name) }

// parseID splits an ID; a pod outside the entry's namespace is never ours.
func (p *Provider) parseID(id provider.ID) (string, error) {
	ns, name, ok := strings.Cut(string(id), "/")
	if !ok || name == "" || ns != p.block.Namespace {
		return "", fmt.Errorf("instance ID %q is not a pod of namespace %s", id, p.block.Namespace)
	}
	return name, nil
}

// MarkOf is the mark a pod carries, as the signature in its
// AnnotationSignature covers it: the installation, entry and owner from its
// labels, its namespace as the place, its instance name, owner and
// creation time from its annotations.
func MarkOf(pod *corev1.Pod) ownership.Mark {
	m := ownership.Mark{
		Installation: pod.Labels[LabelInstallation], Entry: pod.Labels[LabelProvider], Place: "namespace=" + pod.Namespace,
		Name: pod.Annotations[AnnotationName], OwnerUID: pod.Labels[LabelOwnerUID], Owner: pod.Annotations[AnnotationOwner],
	}
	if t, err := time.Parse(time.RFC3339, pod.Annotations[AnnotationCreatedAt]); err == nil {
		m.CreatedAt = t
	}
	return m
}

// ours reports whether a pod carries this entry's mark, signed by this
// installation for this very pod: labels copied onto another pod, or
// written by anyone who may create pods in the namespace, do not verify.
func (p *Provider) ours(pod *corev1.Pod) bool {
	l := pod.Labels
	if l[LabelManagedBy] != LabelManagedByValue || l[LabelProvider] != p.entry.Name || l[LabelOwnerUID] == "" ||
		pod.Annotations[AnnotationName] != pod.Name {
		return false
	}
	return p.ident.Owns(MarkOf(pod), pod.Annotations[AnnotationSignature])
}

// Create implements provider.Provider.
func (p *Provider) Create(ctx context.Context, req provider.Request) (provider.ID, error) {
	if req.Name == "" || req.OwnerUID == "" {
		return "", provider.NewPermanent(errors.New("request without a name or owner UID"), "report a bug")
	}
	pod, err := p.getPod(ctx, p.c, req.Name)
	switch {
	case apierrors.IsNotFound(err):
		pod, err = p.createPod(ctx, req)
		if err != nil {
			return "", err
		}
	case err != nil:
		return "", classify(err, "reading pod "+req.Name)
	}
	if err := p.adoptable(pod, req); err != nil {
		return "", err
	}
	if err := p.ensureCredentials(ctx, pod, req); err != nil {
		return "", err
	}
	return ID(pod.Namespace, pod.Name), nil
}

// adoptable checks that an existing pod of the requested name is this
// request's own.
func (p *Provider) adoptable(pod *corev1.Pod, req provider.Request) error {
	if !p.ours(pod) {
		return provider.NewPermanent(fmt.Errorf("pod %s/%s exists and is not managed by the operator", pod.Namespace, pod.Name),
			"delete or rename that pod; the operator never adopts a pod it did not create")
	}
	if pod.Labels[LabelOwnerUID] != req.OwnerUID {
		return provider.NewPermanent(fmt.Errorf("pod %s/%s belongs to owner %s", pod.Namespace, pod.Name, pod.Labels[LabelOwnerUID]),
			"recreate the Proxy")
	}
	return nil
}

func (p *Provider) createPod(ctx context.Context, req provider.Request) (*corev1.Pod, error) {
	pod, err := p.podFor(req)
	if err != nil {
		return nil, err
	}
	err = p.c.Create(ctx, pod)
	if apierrors.IsAlreadyExists(err) {
		// Created by an earlier attempt the cache has not seen yet, or by
		// someone else: the API server says which.
		existing := &corev1.Pod{}
		if gerr := p.api.Get(ctx, client.ObjectKey{Namespace: p.block.Namespace, Name: req.Name}, existing); gerr != nil {
			return nil, classify(gerr, "reading pod "+req.Name)
		}
		return existing, nil
	}
	if err != nil {
		return nil, classify(err, "creating pod "+req.Name)
	}
	return pod, nil
}

// podFor builds the pod of a request.
func (p *Provider) podFor(req provider.Request) (*corev1.Pod, error) {
	mt, ok := p.entry.MachineTypes[req.MachineType]
	if !ok {
		return nil, provider.NewPermanent(fmt.Errorf("machine type %q is not in the catalogue", req.MachineType), "fix the providers configuration")
	}
	image := p.block.ImageFor(req.Image)
	if image == "" {
		image = p.image
	}
	port := req.Proxy.Port
	if p.block.HostNetwork && port < privilegedPortsEnd && !p.block.AllowPrivilegedHostPorts {
		return nil, provider.NewPermanent(
			fmt.Errorf("port %d is below %d, and with hostNetwork it would be a port of the node itself", port, privilegedPortsEnd),
			"recreate the Proxy with a port of 1024 or more, or set allowPrivilegedHostPorts in the entry's kubernetes block")
	}
	args := []string{"proxy", fmt.Sprintf("--listen=:%d", port), "--admin-listen=0"}
	if len(req.Proxy.AllowedSourceRanges) > 0 {
		ranges := make([]string, 0, len(req.Proxy.AllowedSourceRanges))
		for _, r := range req.Proxy.AllowedSourceRanges {
			ranges = append(ranges, r.Masked().String())
		}
		args = append(args, "--allowed-source-ranges="+strings.Join(ranges, ","))
	}
	args = append(args, req.Proxy.Egress.Args()...)
	secCtx := &corev1.SecurityContext{
		AllowPrivilegeEscalation: ptr(false),
		ReadOnlyRootFilesystem:   ptr(true),
		RunAsNonRoot:             ptr(true),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	if port < privilegedPortsEnd {
		// A non-root process needs this to listen below 1024.
		secCtx.Capabilities.Add = []corev1.Capability{"NET_BIND_SERVICE"}
	}
	containerPort := corev1.ContainerPort{Name: "proxy", ContainerPort: port, Protocol: corev1.ProtocolTCP}
	if p.block.HostNetwork {
		// Declaring the host port makes the scheduler keep two proxies with
		// the same port off one node.
		containerPort.HostPort = port
	}
	probe := &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(port)}},
		PeriodSeconds: 10, TimeoutSeconds: 2}
	container := corev1.Container{
		Name: containerName, Image: image, Args: args,
		Ports:           []corev1.ContainerPort{containerPort},
		Resources:       p.block.ResourcesFor(mt),
		ReadinessProbe:  probe,
		LivenessProbe:   probe.DeepCopy(),
		SecurityContext: secCtx,
	}
	var volumes []corev1.Volume
	if req.Proxy.Credentials != nil {
		container.Args = append(container.Args, "--credentials-dir="+credentialsMount)
		container.VolumeMounts = []corev1.VolumeMount{{Name: credentialsVolume, MountPath: credentialsMount, ReadOnly: true}}
		volumes = []corev1.Volume{{Name: credentialsVolume, VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
			SecretName: req.Name + credentialsSuffix, DefaultMode: ptr(int32(0o440)),
		}}}}
	}
	labels := map[string]string{LabelName: LabelNameValue, LabelOwnerUID: req.OwnerUID}
	for k, v := range p.labels {
		labels[k] = v
	}
	spec := corev1.PodSpec{
		NodeSelector:                  p.block.NodeSelector(req.Zone),
		HostNetwork:                   p.block.HostNetwork,
		ServiceAccountName:            p.block.ServiceAccountName,
		AutomountServiceAccountToken:  ptr(false),
		RestartPolicy:                 corev1.RestartPolicyAlways,
		TerminationGracePeriodSeconds: ptr(int64(30)),
		EnableServiceLinks:            ptr(false),
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot: ptr(true), RunAsUser: ptr(int64(nonRootUID)), RunAsGroup: ptr(int64(nonRootUID)),
			FSGroup: ptr(int64(nonRootUID)), SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{container},
		Volumes:    volumes,
	}
	if p.block.HostNetwork {
		spec.DNSPolicy = corev1.DNSClusterFirstWithHostNet
	}
	for _, s := range p.block.ImagePullSecrets {
		spec.ImagePullSecrets = append(spec.ImagePullSecrets, corev1.LocalObjectReference{Name: s})
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: req.Name, Namespace: p.block.Namespace, Labels: labels,
			Annotations: map[string]string{
				AnnotationOwner:     req.Owner.String(),
				AnnotationName:      req.Name,
				AnnotationCreatedAt: p.now().UTC().Format(time.RFC3339),
			},
		},
		Spec: spec,
	}
	pod.Annotations[AnnotationSignature] = p.ident.Sign(MarkOf(pod))
	return pod, nil
}

// ensureCredentials copies the Proxy's credentials into a Secret next to
// the pod (a pod can only mount Secrets of its own namespace), owned by the
// pod so that it goes with it.
func (p *Provider) ensureCredentials(ctx context.Context, pod *corev1.Pod, req provider.Request) error {
	ref := req.Proxy.Credentials
	if ref == nil {
		return nil
	}
	name := pod.Name + credentialsSuffix
	existing := &corev1.Secret{}
	err := p.c.Get(ctx, client.ObjectKey{Namespace: pod.Namespace, Name: name}, existing)
	if err == nil {
		if !p.oursSecret(existing) || !metav1.IsControlledBy(existing, pod) {
			return provider.NewPermanent(fmt.Errorf("secret %s/%s exists and is not the pod's", pod.Namespace, name),
				"delete or rename that secret")
		}
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return classify(err, "reading secret "+name)
	}
	// From the API server: the operator created this Secret moments ago,
	// and the cache may not have it yet.
	var src corev1.Secret
	err = p.api.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &src)
	if apierrors.IsNotFound(err) {
		return provider.NewTransient(fmt.Errorf("the credentials secret %s/%s does not exist (yet)", ref.Namespace, ref.Name))
	}
	if err != nil {
		return classify(err, fmt.Sprintf("reading the credentials secret %s/%s", ref.Namespace, ref.Name))
	}
	user, pass := src.Data[ref.UsernameKey], src.Data[ref.PasswordKey]
	if len(user) == 0 || len(pass) == 0 {
		return provider.NewTransient(fmt.Errorf("the credentials secret %s/%s lacks %s or %s", ref.Namespace, ref.Name, ref.UsernameKey, ref.PasswordKey))
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: pod.Namespace, Labels: p.markLabels(req.OwnerUID),
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID, Controller: ptr(true),
			}},
		},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{secretKeyUsername: user, secretKeyPassword: pass},
	}
	s.Annotations = map[string]string{AnnotationSignature: p.ident.Sign(secretMark(s))}
	if err := p.c.Create(ctx, s); err != nil && !apierrors.IsAlreadyExists(err) {
		return classify(err, "creating secret "+name)
	}
	return nil
}

// secretMark is the mark a credentials Secret carries: its labels, its
// namespace and its name, signed like a pod's (without instance name,
// owner or creation time, which it does not hold).
func secretMark(s *corev1.Secret) ownership.Mark {
	return ownership.Mark{
		Installation: s.Labels[LabelInstallation], Entry: s.Labels[LabelProvider], Place: "secret in namespace=" + s.Namespace,
		Name: s.Name, OwnerUID: s.Labels[LabelOwnerUID],
	}
}

// oursSecret reports whether a credentials Secret is this installation's
// and entry's: labelled, and signed for its own name and namespace.
func (p *Provider) oursSecret(s *corev1.Secret) bool {
	return s.Labels[LabelManagedBy] == LabelManagedByValue && s.Labels[LabelProvider] == p.entry.Name &&
		p.ident.Owns(secretMark(s), s.Annotations[AnnotationSignature])
}

func (p *Provider) markLabels(ownerUID string) map[string]string {
	l := map[string]string{LabelOwnerUID: ownerUID}
	for k, v := range p.labels {
		l[k] = v
	}
	return l
}

func (p *Provider) getPod(ctx context.Context, r client.Reader, name string) (*corev1.Pod, error) {
	pod := &corev1.Pod{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: p.block.Namespace, Name: name}, pod); err != nil {
		return nil, err
	}
	return pod, nil
}

// Get implements provider.Provider.
func (p *Provider) Get(ctx context.Context, id provider.ID) (provider.Instance, error) {
	name, err := p.parseID(id)
	if err != nil {
		return provider.Instance{}, provider.NewNotFound(err)
	}
	pod, err := p.getPod(ctx, p.c, name)
	if apierrors.IsNotFound(err) || (err == nil && !p.ours(pod)) {
		// NotFound makes the operator replace the instance. The cache may
		// not have seen a pod created a moment ago (or may still hold a
		// predecessor's), so the verdict comes from the API server itself.
		pod, err = p.getPod(ctx, p.api, name)
	}
	if apierrors.IsNotFound(err) {
		return provider.Instance{}, provider.NewNotFound(fmt.Errorf("pod %s does not exist", id))
	}
	if err != nil {
		return provider.Instance{}, classify(err, "reading pod "+name)
	}
	if !p.ours(pod) {
		// Whatever has that name now, it is not the instance we made.
		return provider.Instance{}, provider.NewNotFound(fmt.Errorf("pod %s is not managed by the operator", id))
	}
	return p.instance(pod), nil
}

// instance maps a pod to an Instance.
func (p *Provider) instance(pod *corev1.Pod) provider.Instance {
	in := provider.Instance{
		ID: ID(pod.Namespace, pod.Name), Name: pod.Annotations[AnnotationName], OwnerUID: pod.Labels[LabelOwnerUID],
		Node: pod.Spec.NodeName, State: provider.StateProvisioning,
	}
	if t, err := time.Parse(time.RFC3339, pod.Annotations[AnnotationCreatedAt]); err == nil {
		in.CreatedAt = t
	}
	switch {
	case pod.DeletionTimestamp != nil:
		// Evicted or deleted behind our back: it will not serve again.
		in.State = provider.StateStopped
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		in.State = provider.StateStopped
	case pod.Status.Phase == corev1.PodRunning && podReady(pod):
		in.State = provider.StateRunning
		ip := pod.Status.PodIP
		if p.block.HostNetwork && pod.Status.HostIP != "" {
			ip = pod.Status.HostIP
		}
		if addr, err := netip.ParseAddr(ip); err == nil {
			in.Address = addr
		}
	}
	return in
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Delete implements provider.Provider.
func (p *Provider) Delete(ctx context.Context, id provider.ID) error {
	name, err := p.parseID(id)
	if err != nil {
		return provider.NewPermanent(err, "none: the operator deletes only pods in its configured namespace")
	}
	pod, err := p.getPod(ctx, p.api, name)
	switch {
	case apierrors.IsNotFound(err):
		return p.deleteSecret(ctx, name, "")
	case err != nil:
		return classify(err, "reading pod "+name)
	case !p.ours(pod):
		// Not ours: the Proxy's pod is gone and another took its name. It
		// is left alone; the Proxy's credentials Secret, if still there,
		// goes (deleteSecret checks it is ours).
		return p.deleteSecret(ctx, name, "")
	}
	if pod.DeletionTimestamp == nil {
		// The UID precondition keeps a pod that replaced ours under the same
		// name out of reach.
		err := p.c.Delete(ctx, pod, client.Preconditions{UID: &pod.UID})
		if err != nil && !apierrors.IsNotFound(err) {
			return classify(err, "deleting pod "+name)
		}
	}
	return p.deleteSecret(ctx, name, pod.Labels[LabelOwnerUID])
}

// deleteSecret removes the pod's credentials Secret when it is ours. The
// owner reference would remove it too, but not on a cluster without garbage
// collection, and not before the pod is gone.
func (p *Provider) deleteSecret(ctx context.Context, podName, ownerUID string) error {
	var s corev1.Secret
	err := p.api.Get(ctx, client.ObjectKey{Namespace: p.block.Namespace, Name: podName + credentialsSuffix}, &s)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return classify(err, "reading secret "+podName+credentialsSuffix)
	}
	if !p.oursSecret(&s) || (ownerUID != "" && s.Labels[LabelOwnerUID] != ownerUID) {
		return nil
	}
	if err := p.c.Delete(ctx, &s, client.Preconditions{UID: &s.UID}); err != nil && !apierrors.IsNotFound(err) {
		return classify(err, "deleting secret "+s.Name)
	}
	return nil
}

// ListByTag implements provider.Provider.
func (p *Provider) ListByTag(ctx context.Context) ([]provider.Instance, error) {
	var pods corev1.PodList
	if err := p.c.List(ctx, &pods, client.InNamespace(p.block.Namespace), client.MatchingLabels(p.labels)); err != nil {
		return nil, classify(err, "listing pods")
	}
	out := make([]provider.Instance, 0, len(pods.Items))
	var unverified []provider.Instance
	for i := range pods.Items {
		pod := &pods.Items[i]
		switch {
		case p.ours(pod):
			out = append(out, p.instance(pod))
		case pod.Annotations[AnnotationSignature] != "" && pod.Labels[LabelProvider] == p.entry.Name &&
			errors.Is(p.ident.Verify(MarkOf(pod), pod.Annotations[AnnotationSignature]), ownership.ErrBadSignature):
			unverified = append(unverified, provider.Instance{ID: ID(pod.Namespace, pod.Name), Name: pod.Name, Node: pod.Spec.NodeName})
		}
	}
	p.mu.Lock()
	p.unverified = unverified
	p.mu.Unlock()
	return out, nil
}

// Unverified implements provider.UnverifiedLister, from the latest
// ListByTag.
func (p *Provider) Unverified() []provider.Instance {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]provider.Instance(nil), p.unverified...)
}

// classify maps a Kubernetes API error to a provider error class.
func classify(err error, what string) error {
	wrapped := fmt.Errorf("%s: %w", what, err)
	switch {
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		// A refusal: a read retries, a create latches (provider.ReasonRefused).
		return provider.NewRefused(wrapped, "grant the operator's service account the RBAC rights the kubernetes provider needs (see docs/kubernetes.md)")
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return provider.NewPermanent(wrapped, "check the kubernetes block of the providers configuration")
	case apierrors.IsNotFound(err):
		return provider.NewPermanent(wrapped, "create the namespace or Secret it names")
	default:
		return provider.NewTransient(wrapped)
	}
}

func ptr[T any](v T) *T { return &v }
