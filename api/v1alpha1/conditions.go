package v1alpha1

// Condition types.
const (
	// ConditionReady is the Proxy condition that is True when the proxy runs,
	// has an address and can be used.
	ConditionReady = "Ready"
	// ConditionHealthy is the ProviderHealth condition that is True when the
	// provider entry can serve.
	ConditionHealthy = "Healthy"
	// ConditionReadsAuthorized is the ProviderHealth condition that is False
	// when the provider's API refused (401, 403) a read the operator made
	// for a Proxy since the previous check. It is absent when no read was
	// refused.
	ConditionReadsAuthorized = "ReadsAuthorized"
	// ConditionServing is the Proxy condition that is True when the last
	// probe through the proxy passed: it answered with its credentials,
	// refused a wrong password and (when configured) reported its egress
	// address. Only Serving members are in a pool's published list.
	ConditionServing = "Serving"
	// ConditionRotating is the ProxyPool condition that is True while
	// members are being replaced.
	ConditionRotating = "Rotating"
	// ConditionEgressDistinct is the ProxyPool condition that is True when
	// no two Serving members share an egress address.
	ConditionEgressDistinct = "EgressDistinct"
	// ConditionOwnershipKey is the ProviderHealth condition that says
	// whether the entry's instances verify with the operator's ownership
	// key. It is False (reason OwnershipKeyMismatch) when instances carry
	// this installation's mark and none verifies, the sign of a lost or
	// replaced key: nothing is created on the entry then. It is absent
	// before the first listing of the entry, and for provider types that
	// cannot tell (docs/security.md).
	ConditionOwnershipKey = "OwnershipKey"
	// ConditionEgressPolicyCurrent is the Proxy condition that says whether
	// its instance enforces the provider entry's current egress policy: an
	// instance is configured once, when it is made, so a changed
	// egressPolicy reaches only instances made after the change. It is
	// absent while the Proxy has no instance.
	ConditionEgressPolicyCurrent = "EgressPolicyCurrent"
)

// Reasons of the Proxy EgressPolicyCurrent condition.
const (
	// ReasonCurrentEgressPolicy (True): the instance was made with the
	// entry's current egress policy.
	ReasonCurrentEgressPolicy = "CurrentEgressPolicy"
	// ReasonOlderEgressPolicy (False): the instance was made with an older
	// egress policy of the entry and still enforces it; delete and re-create
	// the Proxy to apply the current one (a ProxyPool replaces its members
	// by itself).
	ReasonOlderEgressPolicy = "OlderEgressPolicy"
	// ReasonEgressPolicyUnrecorded (Unknown): the instance was made before
	// the operator recorded the policy (status.egressPolicyHash), so
	// whether it enforces the current one is unknown.
	ReasonEgressPolicyUnrecorded = "EgressPolicyUnrecorded"
)

// Reasons of the Proxy Serving condition.
const (
	// ReasonProbePassed (Serving=True): the last probe through the proxy
	// passed.
	ReasonProbePassed = "ProbePassed"
	// ReasonProbeFailing (Serving=False): the last probe failed, fewer times
	// in a row than the failure threshold; the message has the failure.
	ReasonProbeFailing = "ProbeFailing"
	// ReasonProbeFailed (Serving=False): the probe failed the threshold
	// number of times in a row. A pool replaces such a member; a lone Proxy
	// keeps this mark until a probe passes again.
	ReasonProbeFailed = "ProbeFailed"
	// ReasonProbePending (Serving=Unknown): the proxy is Ready and has not
	// been probed yet.
	ReasonProbePending = "ProbePending"
	// ReasonProbeDisabled (Serving=True): the operator runs without
	// probes (no prober configured); Serving follows Ready.
	ReasonProbeDisabled = "ProbeDisabled"
	// ReasonNotReady (Serving=False): the proxy is not Ready, so it is not
	// probed.
	ReasonNotReady = "NotReady"
)

// Reasons of the ProxyPool conditions.
const (
	// ReasonAllMembersServing (Ready=True): at least replicas members serve.
	ReasonAllMembersServing = "AllMembersServing"
	// ReasonMembersNotServing (Ready=False): fewer members serve than asked
	// for, and none is stuck: they are being created, probed or replaced.
	ReasonMembersNotServing = "MembersNotServing"
	// ReasonMembersFailed (Ready=False): some members are Failed (for
	// example the provider refused more instances: its capacity or quota is
	// reached). The pool does not delete and recreate them in a loop; the
	// message names them and their reason.
	ReasonMembersFailed = "MembersFailed"
	// ReasonPoolInvalidSpec (Ready=False): the template or a placement
	// entry names a provider or zone the configuration does not have.
	// Nothing is created until the spec is fixed.
	ReasonPoolInvalidSpec = "InvalidSpec"
	// ReasonRotationInProgress (Rotating=True): members are being replaced;
	// the message says how many and why.
	ReasonRotationInProgress = "RotationInProgress"
	// ReasonNoRotation (Rotating=False): every member is current.
	ReasonNoRotation = "NoRotation"
	// ReasonInvalidRotationRequest (Rotating=False): the rotate annotation
	// cannot be read. It is left in place and nothing is rotated until it is
	// fixed or removed; the message says what is wrong.
	ReasonInvalidRotationRequest = "InvalidRotationRequest"
	// ReasonDistinctEgress (EgressDistinct=True): every Serving member has
	// its own egress address.
	ReasonDistinctEgress = "DistinctEgress"
	// ReasonDuplicateEgress (EgressDistinct=False): two or more Serving
	// members share an egress address; the message names them.
	ReasonDuplicateEgress = "DuplicateEgress"
	// ReasonEgressUnknown (EgressDistinct=Unknown): no probe reported an
	// egress address (the provider entries configure no check URL).
	ReasonEgressUnknown = "EgressUnknown"
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
	// ReasonProviderRefused (Ready=Unknown on a Ready Proxy, else False): the
	// provider's API refused the operator's credentials or permissions while
	// reading the instance (HTTP 401 or 403), as it may briefly while a token
	// is rotated or an ACL edited. The Proxy keeps its phase, address and
	// URL, the operator retries with backoff, and the entry's ProviderHealth
	// shows the refusal (condition ReadsAuthorized). No retry annotation is
	// needed: the Proxy is Ready again at the first read that succeeds. If it
	// lasts, fix the token or its privileges as the message says.
	ReasonProviderRefused = "ProviderRefused"
	// ReasonPermanentError (Ready=False, phase Failed): a provider call failed
	// in a way that needs a human (permissions, missing template, quota). The
	// operator stops retrying until the spec changes or the annotation
	// crawl.example.com/retry is set on the Proxy.
	ReasonPermanentError = "PermanentError"
	// ReasonReplacementLoop (Ready=False, phase Failed): the instance was
	// replaced more often than the operator allows in its window (by default
	// 5 in an hour, each successor after an exponentially longer wait), so it
	// stopped creating: something kills instances right after they start (a
	// broken image or template, a host that stops them, a guest that cannot
	// boot). Nothing of the Proxy runs. Find the cause in the events and on
	// the hypervisor, then set the annotation crawl.example.com/retry on the
	// Proxy, which starts a new window.
	ReasonReplacementLoop = "ReplacementLoop"
	// ReasonCreateQueued (Ready=False): the provider entry already creates
	// as many instances at once as its maxConcurrentCreates allows; this
	// Proxy's create waits for one of them to finish.
	ReasonCreateQueued = "CreateQueued"
	// ReasonOwnershipKeyMismatch (Ready=False, or Unknown on a Ready Proxy
	// whose phase is kept): the Proxy's provider entry holds instances
	// marked by this installation that the current ownership key does not
	// verify, and none that it does; the key was lost or replaced. Nothing
	// is created or replaced on the entry, so that no second fleet is made
	// beside the first, until the administrator restores the key Secret
	// from its backup (and restarts the operator) or starts afresh with the
	// annotation crawl.example.com/start-afresh on the entry's
	// ProviderHealth. Also the ProviderHealth OwnershipKey condition's
	// reason (False), whose message lists the instances.
	ReasonOwnershipKeyMismatch = "OwnershipKeyMismatch"
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
	// ReasonKeyVerified (OwnershipKey=True): the entry's instances verify
	// with the current key, or it has none of this installation's. The
	// message counts marks of this installation that do not verify beside
	// them (copied or forged, or left from an earlier key).
	ReasonKeyVerified = "KeyVerified"
	// ReasonStartedAfresh (OwnershipKey=True): the entry's instances do not
	// verify, and the administrator said to start afresh with the current
	// key (AnnotationStartAfresh): the operator creates again, and the
	// message lists the old instances, which it never touches, to remove by
	// hand.
	ReasonStartedAfresh = "StartedAfresh"
	// ReasonReadRefused (ReadsAuthorized=False): the provider's API refused a
	// read of an instance since the previous check; the message has the last
	// refusal and what to fix if it lasts.
	ReasonReadRefused = "ReadRefused"
)

// Annotations the operator reads.
const (
	// AnnotationRetry, set to any value on a Proxy in phase Failed, makes the
	// operator try again. The operator removes it once it acted on it.
	AnnotationRetry = "crawl.example.com/retry"
	// AnnotationReleaseFinalizer, set to any value on a Proxy being deleted
	// whose provider entry is no longer in the operator's configuration,
	// makes the operator remove its finalizer without removing the instance,
	// which it can no longer reach. A Warning event (ReleasedWithoutCleanup)
	// names the instance that may be left on the hypervisor: remove it by
	// hand. On a Proxy whose entry is configured it does nothing: the
	// operator removes the instance first, however long that takes.
	AnnotationReleaseFinalizer = "crawl.example.com/release-finalizer"
	// AnnotationRotate, set on a ProxyPool, asks for an on-demand rotation:
	// the value "all" rotates every member, otherwise it is a
	// comma-separated list of member names. The operator marks the members
	// (AnnotationRotationRequested) and removes it; a value it cannot read
	// stays, with the Rotating condition reason InvalidRotationRequest.
	AnnotationRotate = "crawl.example.com/rotate"
	// AnnotationStartAfresh, on a ProviderHealth whose OwnershipKey
	// condition says OwnershipKeyMismatch, with the current key's ID (the
	// condition's message gives it) as its value, tells the operator to
	// create on the entry again with the current key: the old instances
	// stay unrecognised, and running, until a person removes them. A value
	// that names another key does nothing, so that an annotation left from
	// one key loss never waves the next one through (docs/security.md).
	AnnotationStartAfresh = "crawl.example.com/start-afresh"
	// AnnotationRotationRequested, on a pool member (set by the operator
	// from AnnotationRotate, or by a human), makes the pool replace that
	// member, surge first. Its value is informative.
	AnnotationRotationRequested = "crawl.example.com/rotation-requested"
)

// Labels the operator sets on pool members.
const (
	// LabelPool names the ProxyPool a member belongs to; status.selector of
	// the pool selects on it.
	LabelPool = "crawl.example.com/pool"
	// LabelPoolSlot is the member's slot: its index in the pool, which fixes
	// its placement.
	LabelPoolSlot = "crawl.example.com/pool-slot"
	// LabelPoolGeneration is the member's serial number in its pool; a
	// successor has a higher one than the member it replaces.
	LabelPoolGeneration = "crawl.example.com/pool-generation"
	// LabelTemplateHash is a hash of the template and placement a member was
	// made from; a member with another hash is rotated.
	LabelTemplateHash = "crawl.example.com/pool-template-hash"
)

// Reasons of the ProxyGateway Ready condition.
const (
	// ReasonGatewayReady (Ready=True): at least one gateway pod is ready,
	// which it is only once it has members to send to.
	ReasonGatewayReady = "GatewayReady"
	// ReasonNoMembers (Ready=False): none of the gateway's pools has a
	// Serving member (or none of them exists yet); the gateway answers 503.
	ReasonNoMembers = "NoMembers"
	// ReasonGatewayNotReady (Ready=False): the pools have members but no
	// gateway pod is ready yet (starting, or failing: see its Deployment).
	ReasonGatewayNotReady = "GatewayNotReady"
	// ReasonGatewayConflict (Ready=False): an object the gateway needs
	// (Deployment, Service, Secret, ...) exists and is not controlled by
	// this gateway; the operator never changes it. The message names it.
	ReasonGatewayConflict = "GatewayConflict"
	// ReasonGatewayApplyFailed (Ready=False): the API server refused an
	// object the gateway needs (an admission policy, a quota, RBAC); the
	// message carries the API's own words, and the operator tries again.
	ReasonGatewayApplyFailed = "ApplyFailed"
)
