package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"runtime/debug"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
	"github.com/CycloneDX/cyclonedx-gomod/pkg/generate/bin"
	"github.com/rs/zerolog"
)

// writeSBOM writes the CycloneDX SBOM of the binary bin to file, from the
// module list the Go linker embedded in it (cyclonedx-gomod's bin mode:
// exactly the modules compiled in, with the Go standard library). What the
// generator leaves to its caller is set from the binary and the stamp, never
// from the clock, so that two builds write the same SBOM.
func writeSBOM(binary, file string, st stamp) error {
	g, err := bin.NewGenerator(binary,
		bin.WithVersionOverride(st.Version),
		bin.WithIncludeStdlib(true),
		bin.WithLogger(zerolog.Nop()))
	if err != nil {
		return err
	}
	bom, err := g.Generate()
	if err != nil {
		return fmt.Errorf("sbom of %s: %w", binary, err)
	}
	b, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	bom.SerialNumber = "urn:uuid:" + uuidOf(b)
	bom.Metadata.Timestamp = st.Time.Format(time.RFC3339)
	bom.Metadata.Tools = &cdx.ToolsChoice{Components: &[]cdx.Component{{
		Type: cdx.ComponentTypeApplication, Group: "CycloneDX", Name: "cyclonedx-gomod", Version: moduleVersion("github.com/CycloneDX/cyclonedx-gomod"),
	}}}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := cdx.NewBOMEncoder(f, cdx.BOMFileFormatJSON).SetPretty(true).EncodeVersion(bom, cdx.SpecVersion1_6); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", file, err)
	}
	return f.Close()
}

// uuidOf is a name-based UUID (version 8, RFC 9562) of the binary's bytes:
// the same binary, the same serial number.
func uuidOf(b []byte) string {
	h := sha256.Sum256(b)
	h[6] = h[6]&0x0f | 0x80
	h[8] = h[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// moduleVersion is the version of a module compiled into this program.
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "unknown"
}
