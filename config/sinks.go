package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/outbox-relay/outbox-relay/internal/sqlident"
)

// SinkConfig is the section of one sink kind (sinks[i].<type>): a plain
// struct with yaml tags, declared by the kind's package, which registers it
// (sink.Register) so that this package can decode it without importing the
// kind. Defaults sets every zero field to its default; Validate names the
// field and the bad value, each message starting with the section's key
// ("kafka.brokers: ...").
type SinkConfig interface {
	Defaults()
	Validate() error
}

// FanOut is implemented by the section of a sink kind that is a gateway (a
// webhook sink): one binlog stream fanned out to many endpoints, each with a
// pipeline and checkpoint "<sink>/<endpoint>" of its own.
type FanOut interface {
	SinkConfig
	// StaticEndpoints names the endpoints written in the file.
	StaticEndpoints() []string
	// GatewayConfig is the fan-out's tuning (defaults applied by Defaults).
	GatewayConfig() Gateway
}

// SinkKind is what config knows of a sink kind: its type name (the value
// of sinks[i].type and the key of its section) and its section's type.
type SinkKind struct {
	Type string
	// New returns a zero section to decode into.
	New func() SinkConfig
	// Required says what the section needs at least ("at least
	// kafka.brokers"); a sink of this type without its section is an error.
	// Empty: the section may be left out (its defaults are used).
	Required string
}

var (
	kindsMu sync.RWMutex
	kinds   = map[string]SinkKind{}
)

// RegisterSink makes a sink kind's section known to Load. It is called by
// sink.Register, from the kind's package init; registering a type twice
// panics.
func RegisterSink(k SinkKind) {
	kindsMu.Lock()
	defer kindsMu.Unlock()
	if k.Type == "" || k.New == nil {
		panic("config: RegisterSink needs a type and a New")
	}
	if _, ok := kinds[k.Type]; ok {
		panic(fmt.Sprintf("config: sink type %q registered twice", k.Type))
	}
	if k.Type == "name" || k.Type == "type" || k.Type == "start" {
		panic(fmt.Sprintf("config: sink type %q would clash with the key sinks[].%s", k.Type, k.Type))
	}
	kinds[k.Type] = k
}

// SinkTypes lists the registered sink types, sorted.
func SinkTypes() []string {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	out := make([]string, 0, len(kinds))
	for t := range kinds {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

func sinkKind(typ string) (SinkKind, bool) {
	kindsMu.RLock()
	defer kindsMu.RUnlock()
	k, ok := kinds[typ]
	return k, ok
}

// Sink is one destination: its name and type, and the section named by its
// type, decoded by the kind registered under that type. The sections of
// other registered types may be written too; they are checked for unknown
// keys and otherwise ignored.
type Sink struct {
	// Name is unique; it keys the sink's checkpoint. Required.
	Name string `yaml:"name"`
	// Type is the sink's kind: one of the registered kinds (stdout, kafka,
	// webhook, nats, redis, rabbitmq in this repository's build, each with
	// a page in docs/sinks/), whose section is the key of that name.
	// Required.
	Type string `yaml:"type"`
	// Config is the section named by Type, with its defaults applied by
	// Load; nil when the type is unknown, or its section is required and
	// missing (both errors of Validate).
	Config SinkConfig `yaml:"-"`
	// Start is how the sink begins when it has no checkpoint yet, beyond
	// checkpoint.start: with backfill, it is first sent the rows the
	// outbox tables still hold (docs/replay.md, Backfill).
	Start SinkStart `yaml:"start"`

	sections map[string]*yaml.Node // every section as written, by type
}

// SinkStart is how a sink with no checkpoint begins (sinks[].start).
type SinkStart struct {
	// Backfill, when true, sends a sink that has no checkpoint yet the rows
	// the outbox tables hold (each table in primary key order) before it
	// goes live: the live stream begins at the binlog position the
	// backfill began at, after the backfill is done, so together they send
	// each row once. On MySQL the source needs gtid_mode=ON; not for a
	// webhook sink (use replay per endpoint). A sink that has a checkpoint
	// is not backfilled. Default false.
	Backfill bool `yaml:"backfill"`
	// Where selects the rows backfilled: one condition on the outbox
	// table's columns, e.g. status = 'pending' (no ';', no comment). Default
	// none: every row.
	Where string `yaml:"where"`
	// Since, when above 0, backfills only the rows at most this old, by
	// the table's tables[].columns.created_at (e.g. 168h). Default 0: every
	// row the table holds.
	Since time.Duration `yaml:"since"`
	// ChunkSize is how many rows one backfill read takes (one short
	// consistent snapshot, one batch handed on). Default 1000.
	ChunkSize int `yaml:"chunk_size" default:"1000"`
}

// UnmarshalYAML keeps each section's node for decodeSections (checkKeys
// has already checked every key against the registered sections).
func (s *Sink) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: a sink is a mapping of keys (name, type, and its section)", n.Line)
	}
	*s = Sink{sections: map[string]*yaml.Node{}}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch k.Value {
		case "name":
			if err := v.Decode(&s.Name); err != nil {
				return err
			}
		case "type":
			if err := v.Decode(&s.Type); err != nil {
				return err
			}
		case "start":
			if err := v.Decode(&s.Start); err != nil {
				return err
			}
		default:
			if _, ok := sinkKind(k.Value); !ok {
				return fmt.Errorf("line %d: unknown key %q", k.Line, k.Value)
			}
			if !(v.Kind == yaml.ScalarNode && v.Tag == "!!null") {
				s.sections[k.Value] = v
			}
		}
	}
	return nil
}

// decodeSection decodes the section of the sink's type into Config: a zero
// section when it is left out and not required.
func (s *Sink) decodeSection(path string) error {
	k, ok := sinkKind(s.Type)
	if !ok {
		return nil // Validate names the type
	}
	n := s.sections[s.Type]
	if n == nil {
		if k.Required == "" {
			s.Config = k.New()
		}
		return nil
	}
	c := k.New()
	if err := n.Decode(c); err != nil {
		return fmt.Errorf("%s.%s: %w", path, s.Type, err)
	}
	s.Config = c
	return nil
}

// validate reports the problems of sink i's section, each under its path.
func (s *Sink) validate(i int, bad func(format string, a ...any)) {
	k, ok := sinkKind(s.Type)
	if !ok {
		types := SinkTypes()
		if len(types) == 0 {
			bad("sinks[%d].type: %q: no sink type is registered in this build (import the sink packages, e.g. sink/all)", i, s.Type)
			return
		}
		bad("sinks[%d].type: %q is not one of %s", i, s.Type, strings.Join(types, ", "))
		return
	}
	if st := s.Start; st.Backfill {
		if _, ok := s.Config.(FanOut); ok {
			bad("sinks[%d].start.backfill: a %s sink fans out to endpoints, each with a checkpoint of its own, which a backfill does not serve yet: replay to an endpoint instead (docs/replay.md)", i, s.Type)
		}
	} else if st.Where != "" || st.Since != 0 {
		bad("sinks[%d].start: where and since select the rows of a backfill: set start.backfill: true, or remove them", i)
	}
	if err := sqlident.CheckCondition(s.Start.Where); err != nil {
		bad("sinks[%d].start.where: %v", i, err)
	}
	if s.Start.Since < 0 {
		bad("sinks[%d].start.since: %s must not be negative", i, s.Start.Since)
	}
	if s.Start.ChunkSize < 1 || s.Start.ChunkSize > 100000 {
		bad("sinks[%d].start.chunk_size: %d is not between 1 and 100000", i, s.Start.ChunkSize)
	}
	if s.Config == nil {
		bad("sinks[%d].%s: the %s section is required for type %s (%s)", i, s.Type, s.Type, s.Type, k.Required)
		return
	}
	if err := s.Config.Validate(); err != nil {
		for _, e := range unjoin(err) {
			bad("sinks[%d].%v", i, e)
		}
	}
}

// sinkSectionType is the Go type of the section key under a sink, for
// checkKeys and isSecretPath.
func sinkSectionType(key string) (reflect.Type, bool) {
	k, ok := sinkKind(key)
	if !ok {
		return nil, false
	}
	return reflect.TypeOf(k.New()), true
}

var sinkType = reflect.TypeFor[Sink]()

// sinkKeys lists the keys a sink takes: name, type and every registered
// section.
func sinkKeys() []string {
	return append([]string{"name", "type", "start"}, SinkTypes()...)
}
