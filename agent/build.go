package agent

import (
	"runtime"
	"runtime/debug"
)

// Build describes the running binary, for `mirrord version` and
// mirrord_build_info.
type Build struct {
	Version   string // the release version, or what the Go toolchain recorded
	GoVersion string // the Go toolchain that built the binary
	FranzGo   string // the franz-go module version (kgo), "unknown" if not recorded
}

// ReadBuild returns the binary's build information. version, when not
// empty, is the release version stamped at build time (-ldflags "-X
// main.version=..."); otherwise the main module's version as the Go
// toolchain recorded it ("(devel)" or a pseudo-version from version
// control) is used.
func ReadBuild(version string) Build {
	b := Build{Version: version, GoVersion: runtime.Version(), FranzGo: "unknown"}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		if b.Version == "" {
			b.Version = "unknown"
		}
		return b
	}
	if b.Version == "" {
		b.Version = info.Main.Version
		if b.Version == "" {
			b.Version = "(devel)"
		}
	}
	for _, m := range info.Deps {
		if m.Path != "github.com/twmb/franz-go" {
			continue
		}
		b.FranzGo = m.Version
		if m.Replace != nil && m.Replace.Version != "" {
			b.FranzGo = m.Replace.Version
		}
	}
	return b
}
