package ownership

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultKeySecret is the name of the Secret that holds the key, in the
// operator's namespace.
const DefaultKeySecret = "egress-proxies-operator-ownership-key" //nolint:gosec // G101: the Secret's name, not a credential.

// KeyField is the Secret's data key that holds the key.
const KeyField = "key"

// Label values of the key Secret, so that a person sees what it is.
const (
	labelManagedBy = "app.kubernetes.io/managed-by"
	labelComponent = "app.kubernetes.io/component"
	managedBy      = "egress-proxies-operator"
	component      = "ownership-key"
)

// The operator reads and creates its key Secret in its own namespace only,
// through the Role ownership-key-role (config/rbac/ownership_key_role.yaml),
// not the ClusterRole. It is written by hand, not generated from
// +kubebuilder:rbac markers: controller-gen names every Role manager-role,
// and kustomize cannot resolve references to two Roles of one name.

// KeyRef names the key Secret.
type KeyRef struct {
	Namespace string
	Name      string
}

// LoadOrCreate returns the identity of installation with the key held by
// the Secret ref, creating the Secret with KeySize random bytes when it does
// not exist. Two operators starting at once end with the same key: the one
// whose create loses reads the winner's. A Secret without a usable key is
// an error, never overwritten: every instance signed with the old key
// would become foreign, and a person must decide (docs/security.md).
//
// c must read from the API server (an uncached client): the manager's
// cache does not hold Secrets, and is not started yet when this runs.
func LoadOrCreate(ctx context.Context, c client.Client, ref KeyRef, installation string) (*Identity, error) {
	if err := ValidateInstallation(installation); err != nil {
		return nil, err
	}
	key, err := loadOrCreateKey(ctx, c, ref)
	if err != nil {
		return nil, err
	}
	return NewIdentity(installation, key)
}

func loadOrCreateKey(ctx context.Context, c client.Client, ref KeyRef) ([]byte, error) {
	var s corev1.Secret
	err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &s)
	if err == nil {
		return keyOf(&s, ref)
	}
	if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("reading the ownership key secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generating the ownership key: %w", err)
	}
	s = corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ref.Namespace, Name: ref.Name,
			Labels: map[string]string{labelManagedBy: managedBy, labelComponent: component},
			Annotations: map[string]string{
				"crawl.example.com/warning": "Signs the marks of every instance this operator made. " +
					"Back it up; if it is lost, the operator leaves all its instances alone (docs/security.md).",
			},
		},
		// Immutable: an edit would turn every instance foreign; a new key
		// needs a delete and a create, which is a decision.
		Immutable: ptr(true),
		Type:      corev1.SecretTypeOpaque,
		Data:      map[string][]byte{KeyField: key},
	}
	err = c.Create(ctx, &s)
	if apierrors.IsAlreadyExists(err) {
		// Another replica created it first: its key is the key.
		var won corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &won); err != nil {
			return nil, fmt.Errorf("reading the ownership key secret %s/%s after a concurrent create: %w", ref.Namespace, ref.Name, err)
		}
		return keyOf(&won, ref)
	}
	if err != nil {
		return nil, fmt.Errorf("creating the ownership key secret %s/%s: %w", ref.Namespace, ref.Name, err)
	}
	return key, nil
}

func keyOf(s *corev1.Secret, ref KeyRef) ([]byte, error) {
	key := s.Data[KeyField]
	if len(key) < KeySize {
		return nil, &invalidKeyError{ref: ref}
	}
	return key, nil
}

// invalidKeyError is a key Secret without a usable key.
type invalidKeyError struct{ ref KeyRef }

func (e *invalidKeyError) Error() string {
	return fmt.Sprintf("the ownership key secret %s/%s has no %q of at least %d bytes: restore it from a backup; "+
		"deleting it makes a new key, and every instance made with the old one is then left alone (docs/security.md)",
		e.ref.Namespace, e.ref.Name, KeyField, KeySize)
}

func ptr[T any](v T) *T { return &v }

// KeyLoader is the manager runnable that gives a pending identity
// (NewPending) its key: it needs leader election, so that only the leader
// reads or creates the key Secret, and two replicas never hold different
// keys. A failure to read or create it is retried for LoadTimeout, then
// ends the manager (and the process): running without the key signs
// nothing and verifies nothing.
type KeyLoader struct {
	// Client reads and creates the Secret; it must read from the API
	// server (see LoadOrCreate).
	Client client.Client
	// Ref names the Secret.
	Ref KeyRef
	// Identity is the pending identity to complete.
	Identity *Identity
	// LoadTimeout bounds the attempts; zero means DefaultLoadTimeout.
	LoadTimeout time.Duration
}

// DefaultLoadTimeout is how long KeyLoader retries before it gives up.
const DefaultLoadTimeout = time.Minute

// loadRetry is the pause between two attempts of KeyLoader.
const loadRetry = 2 * time.Second

// NeedLeaderElection makes only the leader load the key.
func (l *KeyLoader) NeedLeaderElection() bool { return true }

// Start loads (or creates) the key, gives it to the identity and returns.
func (l *KeyLoader) Start(ctx context.Context) error {
	timeout := l.LoadTimeout
	if timeout == 0 {
		timeout = DefaultLoadTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	t := time.NewTicker(loadRetry)
	defer t.Stop()
	for {
		key, err := loadOrCreateKey(ctx, l.Client, l.Ref)
		if err == nil {
			return l.Identity.SetKey(key)
		}
		var invalid *invalidKeyError
		if errors.As(err, &invalid) {
			// A person must restore the Secret: retrying changes nothing.
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("loading the ownership key: %w", err)
		case <-t.C:
		}
	}
}
