package v1alpha1

// Condition types.
const (
	// ConditionReady is the Proxy condition that is True when the proxy runs,
	// has an address and can be used.
	ConditionReady = "Ready"
	// ConditionHealthy is the ProviderHealth condition that is True when the
	// provider entry can serve.
	ConditionHealthy = "Healthy"
)

// Reasons of the Proxy Ready condition. Each says where the Proxy is; the
// condition's message adds the detail and, for failures, what to do.
const (
	// ReasonInstanceRunning (Ready=True): the instance runs and has an
	// address.
	ReasonInstanceRunning = "InstanceRunning"
	// ReasonPending (Ready=False): the operator has not created the instance
	// yet.
	ReasonPending = "Pending"
	// ReasonInvalidSpec (Ready=False, phase Failed): the spec names a
	// provider, zone, machine type or image that the configuration does not
	// have. The message lists what exists. Recreate the Proxy with valid
	// values, or add them to the providers configuration and restart the
	// operator.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonCredentialsConflict (Ready=False, phase Failed): a Secret with the
	// name the operator wants for the credentials exists and is not owned by
	// this Proxy. The operator never overwrites it; delete or rename it.
	ReasonCredentialsConflict = "CredentialsConflict"
	// ReasonProvisioning (Ready=False): the instance is being created or is
	// booting and has no address yet.
	ReasonProvisioning = "Provisioning"
	// ReasonReplacing (Ready=False): the instance stopped or vanished and is
	// being replaced.
	ReasonReplacing = "Replacing"
	// ReasonTransientError (Ready=False): a provider call failed in a way that
	// may pass (network, busy API, lock). The operator retries with capped
	// exponential backoff; the message has the last error.
	ReasonTransientError = "TransientError"
	// ReasonPermanentError (Ready=False, phase Failed): a provider call failed
	// in a way that needs a human (permissions, missing template, quota). The
	// operator stops retrying until the spec changes or the annotation
	// crawl.example.com/retry is set on the Proxy.
	ReasonPermanentError = "PermanentError"
	// ReasonDeleting (Ready=False, phase Deleting): the Proxy is being deleted
	// and its instance removed.
	ReasonDeleting = "Deleting"
	// ReasonDeleteFailed (Ready=False, phase Deleting): removing the instance
	// failed; the operator keeps retrying and the message has the last error.
	ReasonDeleteFailed = "DeleteFailed"
)

// Reasons of the ProviderHealth Healthy condition.
const (
	// ReasonAllTargetsHealthy (Healthy=True): every node or host passed its
	// check.
	ReasonAllTargetsHealthy = "AllTargetsHealthy"
	// ReasonSomeTargetsUnhealthy (Healthy=True): the entry can serve, but some
	// targets failed their check; the message names them.
	ReasonSomeTargetsUnhealthy = "SomeTargetsUnhealthy"
	// ReasonNoHealthyTarget (Healthy=False): no target passed its check; new
	// proxies on this entry cannot be created.
	ReasonNoHealthyTarget = "NoHealthyTarget"
	// ReasonNoTargets (Healthy=False): the check found no node or host to
	// serve from.
	ReasonNoTargets = "NoTargets"
	// ReasonCheckNotSupported (Healthy=Unknown): the provider type has no
	// health check.
	ReasonCheckNotSupported = "CheckNotSupported"
)

// Annotations the operator reads.
const (
	// AnnotationRetry, set to any value on a Proxy in phase Failed, makes the
	// operator try again. The operator removes it once it acted on it.
	AnnotationRetry = "crawl.example.com/retry"
)
