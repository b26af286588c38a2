package config_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/config"
	"github.com/outbox-relay/outbox-relay/sink"
	_ "github.com/outbox-relay/outbox-relay/sink/all"
	"github.com/outbox-relay/outbox-relay/sink/kafka"
)

type inner struct {
	Size int    `yaml:"size" default:"7"`
	Name string `yaml:"name"`
}

type section struct {
	Str     string        `yaml:"str" default:"outbox.event.{{.AggregateType}}"`
	Wait    time.Duration `yaml:"wait" default:"2m"`
	On      *bool         `yaml:"on" default:"true"`
	List    []string      `yaml:"list" default:"[a.>, b]"`
	Inner   inner         `yaml:"inner"`
	Items   []inner       `yaml:"items"`
	Ptr     *inner        `yaml:"ptr"`
	Skipped int           `yaml:"-" default:"9"`
	Derived time.Duration `yaml:"derived" derived:"2 × wait"`
}

func TestSetDefaultsAppliesWhatEachFieldDeclares(t *testing.T) {
	off := false
	tests := []struct {
		name string
		in   section
		want func(section) bool
	}{
		{"a zero section gets every declared default", section{},
			func(s section) bool {
				return s.Str == "outbox.event.{{.AggregateType}}" && s.Wait == 2*time.Minute && *s.On &&
					reflect.DeepEqual(s.List, []string{"a.>", "b"}) && s.Inner.Size == 7 && s.Ptr == nil
			}},
		{"a value written in the file is kept", section{Str: "x", Wait: time.Second, On: &off, List: []string{"c"}},
			func(s section) bool { return s.Str == "x" && s.Wait == time.Second && !*s.On && len(s.List) == 1 }},
		{"an empty list takes the default", section{List: []string{}},
			func(s section) bool { return len(s.List) == 2 }},
		{"each item of a list of sections gets its defaults", section{Items: []inner{{Name: "a"}, {Size: 3}}},
			func(s section) bool { return s.Items[0].Size == 7 && s.Items[1].Size == 3 }},
		{"a section behind a pointer gets its defaults when it is written", section{Ptr: &inner{}},
			func(s section) bool { return s.Ptr.Size == 7 }},
		{"a field that is not in the file is left alone", section{},
			func(s section) bool { return s.Skipped == 0 }},
		{"a derived default is not set here", section{},
			func(s section) bool { return s.Derived == 0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.in
			config.SetDefaults(&s)
			if !tc.want(s) {
				t.Errorf("after SetDefaults: %+v", s)
			}
		})
	}
	// Two sections never share a default's pointer or backing array.
	var a, b section
	config.SetDefaults(&a)
	config.SetDefaults(&b)
	*a.On = false
	a.List[0] = "changed"
	if !*b.On || b.List[0] != "a.>" {
		t.Errorf("sections share their defaults: %v %v", *b.On, b.List)
	}
}

func TestDefaultOfReadsTheDeclaration(t *testing.T) {
	for _, tc := range []struct {
		v          any
		path, want string
	}{
		{section{}, "wait", "2m"},
		{&section{}, "inner.size", "7"},
		{section{}, "items.size", "7"},
		{section{}, "derived", "2 × wait"},
		{section{}, "inner.name", ""},
		{config.Config{}, "delivery.batch_size", "500"},
		{config.Config{}, "source.read_timeout", "3 × source.heartbeat"},
	} {
		if got := config.DefaultOf(tc.v, tc.path); got != tc.want {
			t.Errorf("DefaultOf(%T, %q) = %q, want %q", tc.v, tc.path, got, tc.want)
		}
	}
}

// Every declared default parses as its field's type, and is not its zero
// value: in the config and in every registered sink kind's section.
func TestEveryDeclaredDefaultParses(t *testing.T) {
	types := []reflect.Type{reflect.TypeFor[config.Config]()}
	for _, k := range sink.Kinds() {
		types = append(types, reflect.TypeOf(k.Config()).Elem())
	}
	seen := map[reflect.Type]bool{}
	var walk func(typ reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] || typ == reflect.TypeFor[time.Duration]() {
			return
		}
		seen[typ] = true
		for i := range typ.NumField() {
			f := typ.Field(i)
			key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if key == "" || key == "-" {
				if _, ok := f.Tag.Lookup("default"); ok {
					t.Errorf("%s.%s declares a default but is not in the file", path, f.Name)
				}
				continue
			}
			def, hasDef := f.Tag.Lookup("default")
			_, hasDerived := f.Tag.Lookup("derived")
			switch {
			case hasDef && hasDerived:
				t.Errorf("%s.%s: declare a default or what it is derived from, not both", path, key)
			case hasDef:
				if _, err := config.ParseDefault(f.Type, def); err != nil {
					t.Errorf("%s.%s: %v", path, key, err)
				}
			}
			if ex, ok := f.Tag.Lookup("example"); ok {
				if hasDef || hasDerived {
					t.Errorf("%s.%s: a key with a default shows it; drop its example", path, key)
				} else if _, err := config.ParseDefault(f.Type, strings.TrimPrefix(ex, "# ")); err != nil {
					t.Errorf("%s.%s: its example: %v", path, key, err)
				}
			}
			walk(f.Type, path+"."+key)
		}
	}
	for _, typ := range types {
		walk(typ, typ.String())
	}
}

// The Go constants that runtime packages need (a tag cannot be read at
// compile time) are the declared defaults.
func TestDefaultConstantsAreTheDeclaredDefaults(t *testing.T) {
	for _, tc := range []struct {
		path  string
		value any
	}{
		{"delivery.batch_size", config.DefaultBatchSize},
		{"delivery.batch_bytes", config.DefaultBatchBytes},
		{"delivery.linger", time.Duration(config.DefaultLinger)},
		{"delivery.max_in_flight", config.DefaultMaxInFlight},
		{"delivery.max_in_flight_bytes", config.DefaultMaxInFlightBytes},
		{"delivery.retry_backoff", config.DefaultRetryBackoff},
		{"delivery.max_retry_backoff", config.DefaultMaxRetryBackoff},
		{"delivery.drain_timeout", config.DefaultDrainTimeout},
		{"checkpoint.table", config.DefaultCheckpointTable},
		{"checkpoint.interval", config.DefaultCheckpointInterval},
		{"checkpoint.min_interval", config.DefaultCheckpointGap},
		{"checkpoint.lock_timeout", config.DefaultLockTimeout},
		{"dead_letter.table", config.DefaultDeadLetterTable},
		{"attempts.table", config.DefaultAttemptsTable},
		{"prune.batch_size", config.DefaultPruneBatchSize},
		{"prune.lock_wait_timeout", config.DefaultPruneLockWaitTimeout},
	} {
		if got := declared(t, config.Config{}, tc.path, reflect.TypeOf(tc.value)); got != tc.value {
			t.Errorf("%s: the constant is %v, the declared default %v", tc.path, tc.value, got)
		}
	}
	for _, tc := range []struct {
		path  string
		value any
	}{
		{"queue", config.DefaultGatewayQueue},
		{"max_in_flight", config.DefaultEndpointInFlight},
		{"max_in_flight_bytes", config.DefaultEndpointInFlightBytes},
		{"detach_after", config.DefaultDetachAfter},
		{"max_catch_up", config.DefaultMaxCatchUp},
		{"max_awake", config.DefaultMaxAwake},
		{"disable_after", config.DefaultDisableAfter},
	} {
		if got := declared(t, config.Gateway{}, tc.path, reflect.TypeOf(tc.value)); got != tc.value {
			t.Errorf("gateway.%s: the constant is %v, the declared default %v", tc.path, tc.value, got)
		}
	}
	if got := declared(t, kafka.Config{}, "request_timeout", reflect.TypeFor[time.Duration]()); got != kafka.DefaultRequestTimeout {
		t.Errorf("kafka.request_timeout: %v, declared %v", kafka.DefaultRequestTimeout, got)
	}
}

// declared is the default declared for path under v's type, as a value of
// typ (zero when none is declared: the zero value is the default).
func declared(t *testing.T, v any, path string, typ reflect.Type) any {
	t.Helper()
	d := config.DefaultOf(v, path)
	if d == "" {
		return reflect.Zero(typ).Interface()
	}
	p, err := config.ParseDefault(typ, d)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return p.Interface()
}

func TestDefaultsOfOneServerDoNotApplyToAList(t *testing.T) {
	cfg, err := config.Parse([]byte("source: {servers: ['a:3306', 'b']}\ntables: [{name: a.b}]\nsinks: [{name: out, type: stdout}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Source.Host != "" || cfg.Source.Port != 0 || cfg.Source.ReadTimeout != 15*time.Second || cfg.DeadLetter.Store != "file" ||
		cfg.DeadLetter.Path != "outbox-relay-data/dead-letters" || !*cfg.Checkpoint.Lock || *cfg.Prune.PartitionsAhead != 3 {
		t.Fatalf("defaults: %+v", cfg)
	}
}

// A problem is reported at its line in the file, blank lines and comments
// counted (the decoded nodes are the file's, not a re-marshalled copy).
func TestAProblemIsReportedAtItsLineInTheFile(t *testing.T) {
	_, err := config.Parse([]byte("tables: [{name: a.b}]\n\n\nsinks: [{name: out, type: stdout}]\n\n# tuning\n\ndelivery:\n\n  linger: soon\n"))
	if err == nil || !strings.Contains(err.Error(), `delivery.linger: line 10: "soon" is not a duration`) {
		t.Fatalf("Parse = %v, want the problem at line 10", err)
	}
}

func TestANegativeMinIntervalNamesTheDeclaredDefault(t *testing.T) {
	_, err := config.Parse([]byte("tables: [{name: a.b}]\nsinks: [{name: out, type: stdout}]\ncheckpoint: {min_interval: -1ms}\n"))
	if err == nil || !strings.Contains(err.Error(), "checkpoint.min_interval: -1ms is negative; leave it out for the default 10ms") {
		t.Fatalf("Parse = %v", err)
	}
}
