package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// finalStage is what the Dockerfile's last stage sets for the running
// container: the image is built from it, and checked against it, so that
// the Dockerfile stays the one place these values are written.
type finalStage struct {
	Config v1.Config
	// Binary is where the stage copies the outbox-relay binary.
	Binary string
	// Dirs are the directories it copies with --chown, and their owner.
	Dirs []ownedDir
}

type ownedDir struct {
	Path     string
	UID, GID int
}

// readDockerfile parses the instructions of the Dockerfile's last stage that
// shape the image: USER, WORKDIR, EXPOSE, ENV, HEALTHCHECK, ENTRYPOINT,
// CMD and COPY. Any other instruction of that stage (RUN needs a shell the
// image does not have) is an error.
func readDockerfile(file string) (finalStage, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return finalStage{}, err
	}
	var lines []string
	cur := ""
	for _, l := range strings.Split(string(b), "\n") {
		t := strings.TrimSpace(l)
		if strings.HasPrefix(t, "#") || (t == "" && cur == "") {
			continue
		}
		if c, ok := strings.CutSuffix(t, "\\"); ok {
			cur += c + " "
			continue
		}
		lines = append(lines, cur+t)
		cur = ""
	}
	var st finalStage
	last := -1
	for i, l := range lines {
		if strings.HasPrefix(strings.ToUpper(l), "FROM ") {
			last = i
		}
	}
	if last < 0 {
		return st, fmt.Errorf("%s: no FROM instruction", file)
	}
	for _, l := range lines[last+1:] {
		inst, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(inst) {
		case "USER":
			st.Config.User = rest
		case "WORKDIR":
			st.Config.WorkingDir = rest
		case "EXPOSE":
			if st.Config.ExposedPorts == nil {
				st.Config.ExposedPorts = map[string]struct{}{}
			}
			for _, p := range strings.Fields(rest) {
				if !strings.Contains(p, "/") {
					p += "/tcp"
				}
				st.Config.ExposedPorts[p] = struct{}{}
			}
		case "ENV":
			k, v, ok := strings.Cut(rest, "=")
			if !ok || strings.ContainsAny(k, " \t") {
				return st, fmt.Errorf("%s: ENV %s: write it as ENV KEY=value", file, rest)
			}
			st.Config.Env = append(st.Config.Env, k+"="+strings.Trim(v, `"`))
		case "ENTRYPOINT":
			if st.Config.Entrypoint, err = execForm(rest); err != nil {
				return st, fmt.Errorf("%s: ENTRYPOINT: %w", file, err)
			}
		case "CMD":
			if st.Config.Cmd, err = execForm(rest); err != nil {
				return st, fmt.Errorf("%s: CMD: %w", file, err)
			}
		case "HEALTHCHECK":
			if st.Config.Healthcheck, err = healthcheck(rest); err != nil {
				return st, fmt.Errorf("%s: HEALTHCHECK: %w", file, err)
			}
		case "COPY":
			flags, args := splitFlags(rest)
			if len(args) != 2 {
				return st, fmt.Errorf("%s: COPY %s: want one source and one destination", file, rest)
			}
			if path.Base(args[0]) == "outbox-relay" {
				st.Binary = args[1]
				continue
			}
			d := ownedDir{Path: args[1]}
			if own, ok := flags["--chown"]; ok {
				u, g, _ := strings.Cut(own, ":")
				if d.UID, err = strconv.Atoi(u); err == nil {
					d.GID, err = strconv.Atoi(g)
				}
				if err != nil {
					return st, fmt.Errorf("%s: COPY --chown=%s: write numeric uid:gid", file, own)
				}
			}
			st.Dirs = append(st.Dirs, d)
		default:
			return st, fmt.Errorf("%s: %s in the last stage: the release image is built without a shell and knows only USER, WORKDIR, EXPOSE, ENV, HEALTHCHECK, ENTRYPOINT, CMD and COPY", file, inst)
		}
	}
	if st.Binary == "" || len(st.Config.Entrypoint) == 0 || st.Config.User == "" {
		return st, fmt.Errorf("%s: the last stage must COPY the outbox-relay binary and set USER and ENTRYPOINT", file)
	}
	return st, nil
}

// execForm parses an instruction's JSON (exec) form.
func execForm(s string) ([]string, error) {
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("%s: use the exec form [\"cmd\", \"arg\"] (there is no shell in the image)", s)
	}
	return out, nil
}

// splitFlags separates an instruction's --flag=value words from its arguments.
func splitFlags(s string) (map[string]string, []string) {
	flags := map[string]string{}
	var args []string
	for _, w := range strings.Fields(s) {
		if k, v, ok := strings.Cut(w, "="); ok && strings.HasPrefix(w, "--") {
			flags[k] = v
			continue
		}
		args = append(args, w)
	}
	return flags, args
}

// healthcheck parses HEALTHCHECK [--interval=… --timeout=… --start-period=… --retries=…] CMD [...].
func healthcheck(s string) (*v1.HealthConfig, error) {
	i := strings.Index(s, "CMD ")
	if i < 0 {
		return nil, fmt.Errorf("%s: want HEALTHCHECK [flags] CMD [\"...\"]", s)
	}
	cmd, err := execForm(strings.TrimSpace(s[i+4:]))
	if err != nil {
		return nil, err
	}
	hc := &v1.HealthConfig{Test: append([]string{"CMD"}, cmd...)}
	flags, _ := splitFlags(s[:i])
	for k, v := range flags {
		var err error
		switch k {
		case "--interval":
			hc.Interval, err = time.ParseDuration(v)
		case "--timeout":
			hc.Timeout, err = time.ParseDuration(v)
		case "--start-period":
			hc.StartPeriod, err = time.ParseDuration(v)
		case "--retries":
			hc.Retries, err = strconv.Atoi(v)
		default:
			err = fmt.Errorf("unknown flag")
		}
		if err != nil {
			return nil, fmt.Errorf("%s=%s: %w", k, v, err)
		}
	}
	return hc, nil
}
