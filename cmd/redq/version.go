package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// buildInfo is what "redq version" prints.
type buildInfo struct {
	Version   string `json:"version"`            // the module version, "(devel)" when built from a checkout
	Revision  string `json:"revision,omitempty"` // the VCS commit, when known
	Modified  bool   `json:"modified,omitempty"` // the checkout had changes
	GoVersion string `json:"go_version"`         // the Go toolchain
	Platform  string `json:"platform"`           // GOOS/GOARCH
	GoRedis   string `json:"go_redis,omitempty"` // the go-redis version built in
}

func readBuildInfo() buildInfo {
	b := buildInfo{Version: "(unknown)", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	if info.Main.Version != "" {
		b.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.modified":
			b.Modified = s.Value == "true"
		}
	}
	for _, d := range info.Deps {
		if d.Path == "github.com/redis/go-redis/v9" {
			b.GoRedis = d.Version
		}
	}
	return b
}

func (b buildInfo) String() string {
	s := "redq " + b.Version
	if b.Revision != "" {
		s += " (" + b.Revision
		if b.Modified {
			s += ", modified"
		}
		s += ")"
	}
	s += ", " + b.GoVersion + " " + b.Platform
	if b.GoRedis != "" {
		s += ", go-redis " + b.GoRedis
	}
	return s
}

// versionCommand: redq version [--json]
func versionCommand(fs *flag.FlagSet) func(context.Context, io.Writer, io.Writer) error {
	asJSON := fs.Bool("json", false, "print the build information as JSON")
	return func(ctx context.Context, stdout, stderr io.Writer) error {
		b := readBuildInfo()
		if *asJSON {
			return writeJSON(stdout, b)
		}
		_, err := fmt.Fprintln(stdout, b)
		return err
	}
}
