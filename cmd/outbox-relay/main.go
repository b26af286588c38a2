// Command outbox-relay reads a MySQL or MariaDB binlog and delivers the rows
// inserted into outbox tables to Kafka, webhooks or stdout, at least once.
//
// It only wires the packages together: config parses, canal reads, pipeline
// joins, sink delivers, checkpoint remembers.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/internal/gcfloor"
	"github.com/outbox-relay/outbox-relay/internal/printable"
	_ "github.com/outbox-relay/outbox-relay/sink/all" // every sink kind of this build
)

// Stamped at build time, as the Dockerfile does:
//
//	-ldflags "-X main.version=v1.2.3 -X main.revision=<commit> -X main.buildTime=<RFC 3339>"
//
// Unstamped, version is the module version of the build info (go install
// …@v1.2.3 gives it), and revision and buildTime are its VCS settings (a
// build from a git checkout gives them).
var version, revision, buildTime = "dev", "", ""

type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	// withConfig, for a command that reads the configuration, is its run:
	// it is handed its flag set, with --config, made of synopsis.
	synopsis   string
	withConfig func(ctx context.Context, fs configFlags, args []string, stdout, stderr io.Writer) error
}

// exec runs c with the arguments after its name.
func (c command) exec(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if c.withConfig != nil {
		return c.withConfig(ctx, newConfigFlags(c.name, c.synopsis, stderr), args, stdout, stderr)
	}
	return c.run(ctx, args, stdout, stderr)
}

func commands() []command {
	return []command{
		{name: "run", summary: "read the binlog and deliver outbox events to the configured sinks",
			synopsis: "run --config FILE", withConfig: runCmd},
		{name: "check", summary: "check the server, the user's grants, the outbox tables and the checkpoints",
			synopsis: "check --config FILE", withConfig: checkCmd},
		{name: "status", summary: "show each sink's checkpoint next to the server's position",
			synopsis: "status --config FILE", withConfig: statusCmd},
		{name: "dlq", summary: "list, replay or purge dead-lettered events", run: dlqCmd},
		{name: "attempts", summary: "search the record of webhook delivery attempts: by endpoint, event, status, time", run: attemptsCmd},
		{name: "audit", summary: "check that a sink's destination holds every committed outbox event of a binlog range", run: auditCmd},
		{name: "prune", summary: "delete outbox rows every sink has acknowledged (or drop their partitions)",
			synopsis: "prune --config FILE [--older-than 7d] [--dry-run]", withConfig: pruneCmd},
		{name: "replay", summary: "send a window of the past again to one sink or webhook endpoint, beside the live stream; list or cancel replays", run: replayCmd},
		{name: "endpoints", summary: "add, update, delete a webhook endpoints table's rows and rotate their secrets; enable endpoints disabled for failing; recover one since a time; encrypt a signing secret", run: endpointsCmd},
		{name: "console", summary: "make a token or a tenant link for the gateway's console (its admin API and web page)", run: consoleCmd},
		{name: "gateway", summary: "run one replica of the scaled-out webhook gateway, reading the kafka sink's topics as a consumer group",
			synopsis: "gateway --config FILE --webhook SINK --kafka SINK [--topic T]...", withConfig: gatewayCmd},
		{name: "healthcheck", summary: "probe a running relay's /healthz (for container health checks)", run: healthcheckCmd},
		{name: "version", summary: "print the version", run: versionCmd},
	}
}

func main() {
	// Collect a small heap less often (unless GOGC or GOMEMLIMIT is set):
	// see package gcfloor.
	gcfloor.Start(0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(mainCode(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func mainCode(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "outbox-relay delivers rows inserted into outbox tables, read from the MySQL/MariaDB binlog, to sinks, at least once.\n\nUsage:\n  outbox-relay <command> [flags]\n\nCommands:\n")
		for _, c := range commands() {
			fmt.Fprintf(w, "  %-12s %s\n", c.name, c.summary)
		}
		fmt.Fprintf(w, "\nRun 'outbox-relay <command> --help' for a command's flags.\n")
	}
	if len(args) == 0 {
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "--help", "help":
		usage(stdout)
		return 0
	}
	for _, c := range commands() {
		if c.name == args[0] {
			err := c.exec(ctx, args[1:], stdout, stderr)
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			case errors.Is(err, errUsage):
				return 2
			default:
				// An error may quote a receiver or a server: never let it
				// drive the terminal.
				fmt.Fprintf(stderr, "outbox-relay %s: %s\n", c.name, printable.Lines(err.Error()))
				var ec exitCoder
				if errors.As(err, &ec) {
					return ec.ExitCode()
				}
				return 1
			}
		}
	}
	fmt.Fprintf(stderr, "outbox-relay: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

var errUsage = errors.New("usage")

type exitCoder interface{ ExitCode() int }

// newFlags returns a FlagSet whose --help prints the command's usage.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: outbox-relay %s\n\n", synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args; a bad flag is errUsage (already printed).
func parse(fs *flag.FlagSet, args []string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return errUsage
	}
	return nil
}

// parseFlags parses args' flags and leaves the arguments after them in
// fs.Args(); a bad flag is errUsage (already printed).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}

// configFlags is the flag set of a subcommand that reads the configuration:
// its own flags beside --config FILE.
type configFlags struct {
	*flag.FlagSet
	path *string
}

// newConfigFlags returns the FlagSet (as newFlags) of a subcommand that reads
// the configuration, with its --config flag.
func newConfigFlags(name, synopsis string, stderr io.Writer) configFlags {
	fs := newFlags(name, synopsis, stderr)
	return configFlags{fs, fs.String("config", "outbox-relay.yaml", "path of the YAML config")}
}

// describe replaces the --config flag's usage text.
func (f configFlags) describe(usage string) { f.Lookup("config").Usage = usage }

// load loads the configuration --config names: the sections named
// (config.LoadSections), or all of it.
func (f configFlags) load(sections ...string) (*config.Config, error) {
	if len(sections) == 0 {
		return config.Load(*f.path)
	}
	return config.LoadSections(*f.path, sections...)
}

// parseAndLoad parses args, which are only flags (parse), then loads the
// configuration (load).
func (f configFlags) parseAndLoad(args []string, sections ...string) (*config.Config, error) {
	if err := parse(f.FlagSet, args); err != nil {
		return nil, err
	}
	return f.load(sections...)
}

// verbHelp handles the first argument of a command made of verbs (dlq,
// console, endpoints) when it is not a verb: none prints usage to stderr and
// is errUsage; -h, --help or help prints it to stdout. help is false when
// args[0] is for the command to read.
func verbHelp(args []string, usage string, stdout, stderr io.Writer) (help bool, err error) {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return true, errUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return true, nil
	}
	return false, nil
}

// unknownVerb says that cmd has no verb verb and prints its usage.
func unknownVerb(cmd, verb, usage string, stderr io.Writer) error {
	fmt.Fprintf(stderr, "unknown %s command %q\n", cmd, verb)
	fmt.Fprint(stderr, usage)
	return errUsage
}

func versionCmd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", "version", stderr)
	if err := parse(fs, args); err != nil {
		return err
	}
	bi, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionLine(bi))
	return nil
}

// buildVersion is the -X main.version value, else the module version from
// the build info, else "dev".
func buildVersion() string {
	bi, _ := debug.ReadBuildInfo()
	v, _, _ := stamp(bi)
	return v
}

// stamp is the version, VCS revision and build time of this binary: each
// the -X value when stamped, else what bi says (the module version; the
// vcs.revision, "-dirty" when vcs.modified, and vcs.time settings).
func stamp(bi *debug.BuildInfo) (v, rev, at string) {
	v, rev, at = version, revision, buildTime
	if bi == nil {
		return v, rev, at
	}
	if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			if rev == "" {
				rev = s.Value
			}
		case "vcs.time":
			if at == "" {
				at = s.Value
			}
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if modified && revision == "" && rev != "" {
		rev += "-dirty"
	}
	return v, rev, at
}

// versionLine is what `outbox-relay version` prints.
func versionLine(bi *debug.BuildInfo) string {
	v, rev, at := stamp(bi)
	line := "outbox-relay " + v
	var parts []string
	if rev != "" {
		parts = append(parts, "revision "+rev)
	}
	if at != "" {
		parts = append(parts, "built "+at)
	}
	if bi != nil && bi.GoVersion != "" {
		parts = append(parts, bi.GoVersion)
	}
	if len(parts) > 0 {
		line += " (" + strings.Join(parts, ", ") + ")"
	}
	return line
}
