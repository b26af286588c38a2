package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// healthcheckCmd probes the relay's HTTP listener, for container HEALTHCHECKs
// on images that have no shell or curl.
func healthcheckCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("healthcheck", "healthcheck [--url URL] [--timeout D]", stderr)
	url := fs.String("url", "http://127.0.0.1:9108/healthz", "URL to GET; 200 means healthy")
	timeout := fs.Duration("timeout", 3*time.Second, "how long to wait for the answer")
	if err := parse(fs, args); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return fmt.Errorf("--url %q: %w", *url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w (is http.listen set in the config?)", *url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", *url, resp.Status, body)
	}
	fmt.Fprintf(stdout, "ok: %s\n", resp.Status)
	return nil
}
