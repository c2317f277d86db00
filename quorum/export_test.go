package quorum

// The Lua sources, for the tests that run each script on its own.
var (
	AcquireSource = acquireSrc
	ReleaseSource = releaseSrc
	ExtendSource  = extendSrc
)
