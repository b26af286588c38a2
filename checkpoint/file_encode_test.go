package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/outbox-relay/outbox-relay/event"
)

func encodeCase(i int, acked bool) Checkpoint {
	cp := Checkpoint{Flavor: "mariadb", ServerID: 1, Position: event.Position{GTIDSet: fmt.Sprintf("0-1-%d", i)},
		UpdatedAt: time.Date(2026, 12, 1, 3, 4, 5, i, time.UTC)}
	if acked {
		cp.Acked = &Acked{Events: map[string][]string{
			fmt.Sprintf("0-1-%d", i+2): {"a", "b"},
			fmt.Sprintf("0-1-%d", i+1): {"0192a0c4-5b7e-7d3a-9f1e-000000000001"},
			"0-1-0":                    {"needs \"escaping\" <&>\n\x01é"},
		}, ReadThrough: fmt.Sprintf("0-1-%d", i+3)}
	}
	return cp
}

// The file store writes its document without encoding/json's reflection
// over the acknowledged events: byte for byte what MarshalIndent writes
// when no key lists any, and the same checkpoints read back when they do.
func TestTheFileDocumentIsWhatEncodingJSONWrites(t *testing.T) {
	for _, tc := range []struct {
		name string
		all  map[string]Checkpoint
	}{
		{"no keys", map[string]Checkpoint{}},
		{"keys without acknowledged events", map[string]Checkpoint{"b": encodeCase(1, false), "a/ep \"x\"": encodeCase(2, false)}},
		{"keys with acknowledged events", map[string]Checkpoint{"b": encodeCase(1, true), "a": encodeCase(2, false), "c": encodeCase(3, true)}},
		{"an empty list", map[string]Checkpoint{"a": {Flavor: "mysql", Acked: &Acked{}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := encodeFile(tc.all)
			if err != nil {
				t.Fatal(err)
			}
			back, err := decodeFile(got)
			if err != nil {
				t.Fatalf("%v\n%s", err, got)
			}
			if !reflect.DeepEqual(back, tc.all) {
				t.Fatalf("read back %+v\nwant %+v\n%s", back, tc.all, got)
			}
			for _, cp := range tc.all {
				if cp.Acked != nil {
					return
				}
			}
			want, _ := json.MarshalIndent(fileFormat{Version: 1, Checkpoints: tc.all}, "", "  ")
			if want = append(want, '\n'); !bytes.Equal(got, want) {
				t.Fatalf("document\n%s\nwant\n%s", got, want)
			}
		})
	}
	a := encodeCase(7, true).Acked
	got, _ := json.Marshal(a)
	type plain Acked
	want, _ := json.Marshal((*plain)(a))
	if !bytes.Equal(got, want) {
		t.Fatalf("Acked as JSON\n%s\nwant\n%s", got, want)
	}
}

// A save encodes only the keys it changes and reuses the others' encoding:
// after saves, many-key saves and deletes, the file is still exactly the
// document of every checkpoint the store holds.
func TestTheFileStoreReusesEncodingsOfKeysItDoesNotChange(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cp.json")
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	steps := []func() error{
		func() error { return f.Save(ctx, "a", encodeCase(1, true)) },
		func() error {
			return f.SaveMany(ctx, map[string]Checkpoint{"b": encodeCase(2, false), "c": encodeCase(3, true)})
		},
		func() error { return f.Save(ctx, "a", encodeCase(4, false)) },
		func() error { return f.Delete(ctx, "b") },
		func() error { return f.reload() },
		func() error { return f.Save(ctx, "c", encodeCase(5, true)) },
	}
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		all, _ := f.List(ctx)
		want, _ := encodeFile(all)
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("step %d: the file is\n%s\nwant\n%s", i, got, want)
		}
	}
	all, _ := f.List(ctx)
	if want := map[string]Checkpoint{"a": encodeCase(4, false), "c": encodeCase(5, true)}; !reflect.DeepEqual(all, want) {
		t.Fatalf("the store holds %+v, want %+v", all, want)
	}
}

// A save that fails changes nothing the store holds: the store updates
// its view of the keys in place, and only once the file is written. The
// next save writes the checkpoints held before the failed one.
func TestAFailedSaveLeavesTheFileStoresViewAsItWas(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cp")
	path := filepath.Join(dir, "cp.json")
	f, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := f.SaveMany(ctx, map[string]Checkpoint{"a": encodeCase(1, true), "b": encodeCase(2, false)}); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil { // the save cannot create its temporary file
		t.Fatal(err)
	}
	if err := f.SaveMany(ctx, map[string]Checkpoint{"a": encodeCase(3, false), "new": encodeCase(4, false)}); err == nil {
		t.Fatal("a save into a removed directory succeeded")
	}
	if err := f.Delete(ctx, "b"); err == nil {
		t.Fatal("a delete into a removed directory succeeded")
	}
	want := map[string]Checkpoint{"a": encodeCase(1, true), "b": encodeCase(2, false)}
	if all, _ := f.List(ctx); !reflect.DeepEqual(all, want) {
		t.Fatalf("after failed saves the store holds %+v, want %+v", all, want)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := f.Save(ctx, "c", encodeCase(5, false)); err != nil {
		t.Fatal(err)
	}
	want["c"] = encodeCase(5, false)
	g, err := OpenFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if all, _ := g.List(ctx); !reflect.DeepEqual(all, want) {
		t.Fatalf("the file holds %+v, want %+v", all, want)
	}
	doc, _ := encodeFile(want)
	if got, _ := os.ReadFile(path); !bytes.Equal(got, doc) {
		t.Fatalf("the file is\n%s\nwant\n%s", got, doc)
	}
}

// BenchmarkSaveListingAcknowledgedEvents is one save of a checkpoint that
// lists 5,000 acknowledged events (500 transactions of 10) beyond its
// position, beside 10 other keys: what a sink pays per save while a slow
// partition holds its watermark back.
func BenchmarkSaveListingAcknowledgedEvents(b *testing.B) {
	f, err := OpenFile(filepath.Join(b.TempDir(), "cp.json"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	for k := range 10 {
		if err := f.Save(ctx, fmt.Sprint("other-", k), encodeCase(k, true)); err != nil {
			b.Fatal(err)
		}
	}
	cp := encodeCase(1, false)
	cp.Acked = &Acked{Events: map[string][]string{}}
	for i := range 500 {
		for k := range 10 {
			g := fmt.Sprintf("0-1-%d", 10000+i)
			cp.Acked.Events[g] = append(cp.Acked.Events[g], fmt.Sprintf("0192a0c4-5b7e-7d3a-9f1e-%012d", i*10+k))
		}
	}
	for b.Loop() {
		if err := f.Save(ctx, "kafka", cp); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSaveOneOf1000Keys is one endpoint's save in a gateway of 1,000
// endpoints on the file store: one key changes, the document holds them all.
func BenchmarkSaveOneOf1000Keys(b *testing.B) {
	f, err := OpenFile(filepath.Join(b.TempDir(), "cp.json"))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	all := map[string]Checkpoint{}
	for k := range 1000 {
		all[fmt.Sprintf("webhook/endpoint-%04d", k)] = encodeCase(k, false)
	}
	if err := f.SaveMany(ctx, all); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		if err := f.Save(ctx, fmt.Sprintf("webhook/endpoint-%04d", i%1000), encodeCase(i, false)); err != nil {
			b.Fatal(err)
		}
	}
}

// encodeCheckpointReflect is how the file store encoded a checkpoint
// before it did so by hand (and what older versions write): encoding/json's
// MarshalIndent without the list of acknowledged events, the list then
// appended last, on one line.
func encodeCheckpointReflect(cp Checkpoint) ([]byte, error) {
	acked := cp.Acked
	cp.Acked = nil
	b, err := json.MarshalIndent(cp, "    ", "  ")
	if err != nil || acked == nil {
		return b, err
	}
	const end = "\n    }"
	b = append(b[:len(b)-len(end)], ",\n      \"acked\": "...)
	b = append(b, mustMarshal(acked)...)
	return append(b, end...), nil
}

func mustMarshal(a *Acked) []byte {
	type plain Acked // encoding/json's reflection, not Acked.MarshalJSON
	b, err := json.Marshal((*plain)(a))
	if err != nil {
		panic(err)
	}
	return b
}

// oddStrings need escaping, or not, in every way encoding/json escapes.
var oddStrings = []string{
	"", "a", "0-1-42", "needs \"escaping\" <&>\n\x01é", "\\", "\t\r\b\f", "\u2028\u2029", "\xff\xfe invalid UTF-8",
	"日本語", "\x7f", "emoji 😀", "</script>", "a/b\\c",
}

// A checkpoint is encoded by hand byte for byte as encoding/json (with the
// list of acknowledged events appended on one line) encodes it: every
// field, set or left empty, odd strings, times in zones and with
// fractions, table cursors, lists of acknowledged events.
func TestACheckpointIsEncodedAsEncodingJSONEncodesIt(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	str := func() string {
		if r.IntN(3) == 0 {
			return ""
		}
		return oddStrings[r.IntN(len(oddStrings))]
	}
	num := func() uint32 {
		switch r.IntN(3) {
		case 0:
			return 0
		case 1:
			return uint32(r.IntN(10))
		}
		return r.Uint32()
	}
	zones := []*time.Location{time.UTC, time.FixedZone("", 2*3600), time.FixedZone("x", -(9*3600 + 30*60)), time.FixedZone("", 45)}
	when := func() time.Time {
		switch r.IntN(4) {
		case 0:
			return time.Time{}
		case 1:
			return time.Unix(r.Int64N(1<<34), 0).In(zones[r.IntN(len(zones))])
		}
		return time.Unix(r.Int64N(1<<34), r.Int64N(1e9)).In(zones[r.IntN(len(zones))])
	}
	for i := range 5000 {
		cp := Checkpoint{Flavor: str(), ServerUUID: str(), ServerID: num(),
			Position:   event.Position{GTIDSet: str(), File: str(), Pos: num(), Server: str(), ServerID: num()},
			CommitTime: when(), UpdatedAt: when(), Disabled: str(), Record: str()}
		if r.IntN(3) == 0 {
			tc := &event.TableCursor{Table: str(), Done: r.IntN(2) == 0}
			switch r.IntN(3) {
			case 0:
				tc.Key = []string{}
			case 1:
				for range 1 + r.IntN(3) {
					tc.Key = append(tc.Key, str())
				}
			}
			cp.Position.Table = tc
		}
		if r.IntN(2) == 0 {
			cp.Acked = &Acked{ReadThrough: str()}
			if r.IntN(3) > 0 {
				cp.Acked.Events = map[string][]string{}
				for range r.IntN(4) {
					var ids []string
					for range r.IntN(3) {
						ids = append(ids, str())
					}
					cp.Acked.Events[str()] = ids
				}
			}
		}
		want, werr := encodeCheckpointReflect(cp)
		got, err := encodeCheckpoint(cp)
		if werr != nil {
			t.Fatalf("case %d: encoding/json fails: %v", i, werr)
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("case %d: %+v encodes as\n%s (%v)\nwant\n%s", i, cp, got, err, want)
		}
	}
	// A time encoding/json cannot write is the same error.
	for _, cp := range []Checkpoint{{UpdatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, {CommitTime: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}} {
		_, werr := encodeCheckpointReflect(cp)
		_, err := encodeCheckpoint(cp)
		if werr == nil || err == nil || err.Error() != werr.Error() {
			t.Fatalf("%+v: error %v, want %v", cp, err, werr)
		}
	}
}

// BenchmarkEncodeCheckpoint is one gateway endpoint's checkpoint encoded
// for the file.
func BenchmarkEncodeCheckpoint(b *testing.B) {
	cp := encodeCase(1, false)
	cp.CommitTime = cp.UpdatedAt.Add(-time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := encodeCheckpoint(cp); err != nil {
			b.Fatal(err)
		}
	}
}

// Every field of a checkpoint, of its position, table cursor and list of
// acknowledged events, set at once (by reflection, so that a field added
// later is set too), is encoded by hand as encoding/json encodes it: a new
// field that appendCheckpoint does not write fails here instead of being
// dropped from the file.
func TestEveryFieldOfACheckpointIsEncoded(t *testing.T) {
	var cp Checkpoint
	fillEvery(t, reflect.ValueOf(&cp).Elem())
	want, err := encodeCheckpointReflect(cp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := encodeCheckpoint(cp)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("every field set: appendCheckpoint wrote\n%s (%v)\nencoding/json writes\n%s\nadd the missing field to appendCheckpoint (or appendPosition, Acked.appendJSON)", got, err, want)
	}
}

// fillEvery sets v, and every field within it, to a value that is not its
// zero value.
func fillEvery(t *testing.T, v reflect.Value) {
	t.Helper()
	if v.Type() == reflect.TypeFor[time.Time]() {
		v.Set(reflect.ValueOf(time.Date(2026, 12, 6, 5, 0, 0, 123456789, time.UTC)))
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(7)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(7)
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillEvery(t, v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillEvery(t, v.Index(0))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillEvery(t, k)
		fillEvery(t, e)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillEvery(t, v.Field(i))
			}
		}
	default:
		t.Fatalf("fillEvery: a %s field: teach it this kind", v.Type())
	}
}
