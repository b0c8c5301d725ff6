package ownership_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/egress-proxies/egress-proxies-operator/internal/ownership"
)

var ref = ownership.KeyRef{Namespace: "egress-proxies-system", Name: ownership.DefaultKeySecret}

var markOf = ownership.Mark{Installation: "prod", Name: "n", OwnerUID: "u"}

// TestLoadOrCreateMakesTheKeyOnceAndKeepsIt: the first start creates an
// immutable Secret with a random key; every later start signs alike.
func TestLoadOrCreateMakesTheKeyOnceAndKeepsIt(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().Build()
	first, err := ownership.LoadOrCreate(ctx, c, ref, "prod")
	if err != nil {
		t.Fatal(err)
	}
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &s); err != nil {
		t.Fatalf("the key secret was not created: %v", err)
	}
	if len(s.Data[ownership.KeyField]) != ownership.KeySize || s.Immutable == nil || !*s.Immutable {
		t.Errorf("secret: %d key bytes, immutable %v; want %d bytes, immutable", len(s.Data[ownership.KeyField]), s.Immutable, ownership.KeySize)
	}
	again, err := ownership.LoadOrCreate(ctx, c, ref, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if sig := first.Sign(markOf); again.Verify(markOf, sig) != nil {
		t.Error("a restarted operator does not verify its own marks: the key changed")
	}
	other, err := ownership.LoadOrCreate(ctx, fake.NewClientBuilder().Build(), ref, "prod")
	if err != nil {
		t.Fatal(err)
	}
	if other.Verify(markOf, first.Sign(markOf)) == nil {
		t.Error("two clusters' keys are the same: the key is not random")
	}
}

// TestLoadOrCreateRace: replicas starting at once agree on one key; the
// one whose create loses reads the winner's.
func TestLoadOrCreateRace(t *testing.T) {
	ctx := context.Background()
	var once sync.Once
	var c client.Client
	base := fake.NewClientBuilder().Build()
	c = interceptor.NewClient(base, interceptor.Funcs{
		Create: func(ctx context.Context, w client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			// Another replica's create lands between our Get and Create.
			var err error
			once.Do(func() {
				winner, ok := obj.DeepCopyObject().(*corev1.Secret)
				if !ok {
					err = fmt.Errorf("created a %T, want a Secret", obj)
					return
				}
				winner.Data = map[string][]byte{ownership.KeyField: []byte("the winner's key, thirty-two b..")}
				if err = w.Create(ctx, winner); err == nil {
					err = apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, obj.GetName())
				}
			})
			if err != nil {
				return err
			}
			return w.Create(ctx, obj, opts...)
		},
	})
	loser, err := ownership.LoadOrCreate(ctx, c, ref, "prod")
	if err != nil {
		t.Fatal(err)
	}
	winner, err := ownership.NewIdentity("prod", []byte("the winner's key, thirty-two b.."))
	if err != nil {
		t.Fatal(err)
	}
	if loser.Verify(markOf, winner.Sign(markOf)) != nil {
		t.Error("the replica that lost the create uses another key than the Secret's")
	}
}

// TestLoadOrCreateNeverOverwritesABrokenKey: a Secret without a usable key
// stops the start with advice; it is left as it is.
func TestLoadOrCreateNeverOverwritesABrokenKey(t *testing.T) {
	ctx := context.Background()
	broken := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name},
		Data: map[string][]byte{ownership.KeyField: []byte("short")}}
	c := fake.NewClientBuilder().WithObjects(broken).Build()
	_, err := ownership.LoadOrCreate(ctx, c, ref, "prod")
	if err == nil || !strings.Contains(err.Error(), "restore it from a backup") {
		t.Fatalf("LoadOrCreate over a broken key = %v, want an error with advice", err)
	}
	if strings.Contains(err.Error(), "short") {
		t.Errorf("the error quotes the key: %v", err)
	}
	var s corev1.Secret
	if err := c.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, &s); err != nil || string(s.Data[ownership.KeyField]) != "short" {
		t.Errorf("the broken Secret was changed: %v %q", err, s.Data)
	}
	if _, err := ownership.LoadOrCreate(ctx, c, ref, "Not A Label"); err == nil {
		t.Error("an installation ID that is not a DNS label was accepted")
	}
}
