package checkpoint

import (
	"bytes"
	"testing"
)

// The file store's decoder never panics, whatever it accepts is saved and
// read back to the same checkpoints, and each of those is encoded as
// encoding/json encodes it.
func FuzzDecodeFile(f *testing.F) {
	f.Add([]byte(`{"version": 1, "checkpoints": {"out": {"flavor": "mariadb", "server_id": 1, "position": {"gtid_set": "0-1-42", "file": "binlog.000003", "pos": 1234}, "updated_at": "2026-12-01T03:04:05Z"}}}`))
	f.Add([]byte(`{"version": 1, "checkpoints": {"hooks/ep": {"flavor": "mysql", "server_uuid": "3e11fa47-71ca-11e1-9e33-c80aa9429562", "position": {"gtid_set": "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5"}, "updated_at": "2026-12-01T03:04:05.123+02:00"}}}`))
	f.Add([]byte(`{"version": 1, "checkpoints": {"out": {"flavor": "mariadb", "server_id": 1, "position": {"gtid_set": "0-1-42", "file": "binlog.000003", "pos": 1234, "server_id": 1}, "updated_at": "2026-12-01T03:04:05Z", "acked": {"events": {"0-1-44": ["e1", "e2"]}, "read_through": "0-1-45"}}}}`))
	f.Add([]byte(`{"version": 1, "checkpoints": {"out": {"flavor": "mariadb", "acked": {"events": {"0-1-44": "e1"}}}}}`))
	f.Add([]byte(`{"version": 2}`))
	f.Add([]byte(`{"version": 1, "checkpoints": null}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, b []byte) {
		all, err := decodeFile(b)
		if err != nil {
			return
		}
		enc, err := encodeFile(all)
		if err != nil {
			t.Fatalf("a decoded checkpoint file cannot be saved: %v", err)
		}
		again, err := decodeFile(enc)
		if err != nil {
			t.Fatalf("a saved checkpoint file does not decode: %v\n%s", err, enc)
		}
		enc2, err := encodeFile(again)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("save, load, save differs:\n%s\n%s (%v)", enc, enc2, err)
		}
		for k, cp := range all {
			// Encoded by hand as encoding/json (and older versions) do.
			want, werr := encodeCheckpointReflect(cp)
			if got, err := encodeCheckpoint(cp); werr != nil || err != nil || !bytes.Equal(got, want) {
				t.Fatalf("checkpoint %q encodes as\n%s (%v)\nwant\n%s (%v)", k, got, err, want, werr)
			}
			if again[k].Position != cp.Position || !again[k].UpdatedAt.Equal(cp.UpdatedAt) {
				t.Fatalf("checkpoint %q changed over a save: %+v → %+v", k, cp, again[k])
			}
		}
	})
}
