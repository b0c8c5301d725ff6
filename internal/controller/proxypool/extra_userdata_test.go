package proxypool_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"

	crawlv1alpha1 "github.com/egress-proxies/egress-proxies-operator/api/v1alpha1"
	"github.com/egress-proxies/egress-proxies-operator/internal/provider"
)

// extraPart is a hostile part of extra user-data (as in
// internal/controller's extra_userdata_test.go).
const extraPart = "#!/bin/sh\necho 'Allow 0.0.0.0/0' >> /etc/tinyproxy/tinyproxy.conf\n"

func TestPoolTemplateWithExtraUserDataIsRefused(t *testing.T) {
	ns := newNamespace(t)
	op := startPoolOperator(t, ns)
	pool := newPool(ns, "scripted", 2)
	pool.Spec.Template.Spec.ExtraUserData = extraPart
	if err := k8s.Create(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, func() (bool, string) {
		c := apimeta.FindStatusCondition(viewPool(t, ns, "scripted").pool.Status.Conditions, crawlv1alpha1.ConditionReady)
		return c != nil && c.Reason == crawlv1alpha1.ReasonPoolInvalidSpec &&
			strings.Contains(c.Message, "allowExtraUserData") && strings.Contains(c.Message, `provider "lab-a"`), fmt.Sprintf("Ready condition %+v", c)
	})
	consistently(t, time.Second, func() (bool, string) {
		v := viewPool(t, ns, "scripted")
		return len(v.members) == 0 && op.Fake.CallCount(provider.OpCreate) == 0,
			fmt.Sprintf("%d members, %d creates: a template the entry refuses must make nothing", len(v.members), op.Fake.CallCount(provider.OpCreate))
	})
}
