package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// DefaultReleaseURL is where mooring's releases are downloaded from: a
// release's files are <DefaultReleaseURL>/<version>/<file>.
const DefaultReleaseURL = "https://github.com/mooring-dev/mooring/releases/download"

// releaseArchs are the architectures a release publishes the agent for
// (hack/release.sh's platforms).
var releaseArchs = []string{"amd64", "arm64"}

// versionRE is hack/version.sh's scheme: vMAJOR.MINOR.PATCH[-PRERELEASE],
// no build metadata.
var versionRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// Bounds of reading a release's SHA256SUMS.
const (
	releaseTimeout = 30 * time.Second
	maxSumsSize    = 1 << 20
)

// releaseOptions are user-data's flags that take the agent from a release.
type releaseOptions struct {
	version      string
	releaseURL   string
	arch         string
	agentBaseURL string
}

// assetName is the agent's binary in a release (hack/release.sh).
func (r releaseOptions) assetName() string {
	return "mooring-agent_" + r.version + "_linux_" + r.arch
}

// isHTTP reports whether s is an http(s) URL with a host.
func isHTTP(s string) bool {
	u, err := url.Parse(s)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// check checks the flags' syntax (no I/O), each error naming its flag.
// changed reports whether a flag was given.
func (r releaseOptions) check(changed func(string) bool, agentURL, agentSHA256 string, bad func(string, ...any)) {
	if r.version == "" {
		for _, f := range []string{"release-url", "arch", "agent-base-url"} {
			if changed(f) {
				bad("--%s: only with --version (the release to take the agent from)", f)
			}
		}
		return
	}
	if agentURL != "" || agentSHA256 != "" {
		bad("--version and --agent-url/--agent-sha256: give --version (the release's agent) or --agent-url and --agent-sha256 (a build of your own), not both")
	}
	if !versionRE.MatchString(r.version) {
		bad("--version: want a release's version, vMAJOR.MINOR.PATCH[-PRERELEASE], got %q", r.version)
	}
	if r.arch != releaseArchs[0] && r.arch != releaseArchs[1] {
		bad("--arch: want one of %s, got %q", strings.Join(releaseArchs, ", "), r.arch)
	}
	switch {
	case r.releaseURL == "":
		bad("--release-url: empty")
	case isHTTP(r.releaseURL):
		if r.agentBaseURL != "" {
			bad("--agent-base-url: only with a directory as --release-url (the machines download from --release-url)")
		}
	case strings.Contains(r.releaseURL, "://"):
		bad("--release-url: want an http(s) URL or a directory, got %q", r.releaseURL)
	case r.agentBaseURL == "":
		bad("--release-url=%s is a directory: give --agent-base-url, the http(s) URL the machines download the release's files from", r.releaseURL)
	case !isHTTP(r.agentBaseURL):
		bad("--agent-base-url: want an http(s) URL, got %q", r.agentBaseURL)
	}
}

// resolve reads the release's SHA256SUMS and returns the agent's URL (for
// the machines) and SHA-256.
func (r releaseOptions) resolve(ctx context.Context) (agentURL, digest string, err error) {
	name := r.assetName()
	var sums []byte
	if isHTTP(r.releaseURL) {
		base := strings.TrimSuffix(r.releaseURL, "/") + "/" + r.version
		if sums, err = download(ctx, base+"/SHA256SUMS"); err != nil {
			return "", "", err
		}
		agentURL = base + "/" + name
	} else {
		path := filepath.Join(r.releaseURL, "SHA256SUMS")
		if sums, err = readBounded(path); err != nil {
			return "", "", err
		}
		agentURL = strings.TrimSuffix(r.agentBaseURL, "/") + "/" + name
	}
	if digest, err = sumOf(sums, name); err != nil {
		return "", "", err
	}
	if !isHTTP(r.releaseURL) {
		// The binary beside it, if downloaded too, must be the one listed.
		if got, err := fileDigest(filepath.Join(r.releaseURL, name)); err == nil && got != digest {
			return "", "", fmt.Errorf("%s: sha256 %s, but its SHA256SUMS says %s", filepath.Join(r.releaseURL, name), got, digest)
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			return "", "", err
		}
	}
	return agentURL, digest, nil
}

// download GETs a release's SHA256SUMS, bounded in time and size; an https
// URL is not followed to a plain http one.
func download(ctx context.Context, u string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, releaseTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	client := &http.Client{CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		if via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
			return fmt.Errorf("refusing the redirect from https to %s", req.URL.Redacted())
		}
		return nil
	}}
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // it repeats the method and URL
		}
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		hint := ""
		if resp.StatusCode == http.StatusNotFound {
			hint = " (is there a release of that version?)"
		}
		return nil, fmt.Errorf("GET %s: %s%s", u, resp.Status, hint)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxSumsSize+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if len(data) > maxSumsSize {
		return nil, fmt.Errorf("GET %s: more than %d bytes; not a release's SHA256SUMS", u, maxSumsSize)
	}
	return data, nil
}

// readBounded reads a local SHA256SUMS, bounded as a download is.
func readBounded(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxSumsSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxSumsSize {
		return nil, fmt.Errorf("%s: more than %d bytes; not a release's SHA256SUMS", path, maxSumsSize)
	}
	return data, nil
}

// sumOf finds name's digest in sha256sum's output ("<hex>  <name>", or
// " *<name>" in binary mode). Every line must be one; a name listed twice
// is refused.
func sumOf(sums []byte, name string) (string, error) {
	var digest string
	s := bufio.NewScanner(bytes.NewReader(sums))
	for n := 1; s.Scan(); n++ {
		line := s.Text()
		if line == "" {
			continue
		}
		sum, file, ok := strings.Cut(line, " ")
		if ok && (strings.HasPrefix(file, " ") || strings.HasPrefix(file, "*")) {
			file = file[1:]
		} else {
			ok = false
		}
		if !ok || !digestRE.MatchString(sum) || file == "" {
			return "", fmt.Errorf("SHA256SUMS line %d: want \"<64 lower-case hex digits>  <file>\", got %.80q", n, line)
		}
		if file != name {
			continue
		}
		if digest != "" {
			return "", fmt.Errorf("SHA256SUMS: %s listed twice", name)
		}
		digest = sum
	}
	if err := s.Err(); err != nil {
		return "", fmt.Errorf("SHA256SUMS: %w", err)
	}
	if digest == "" {
		return "", fmt.Errorf("SHA256SUMS has no line for %s (a release before the agent was published alone, or no such architecture)", name)
	}
	return digest, nil
}

func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
