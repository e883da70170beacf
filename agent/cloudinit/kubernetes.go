package cloudinit

import (
	_ "embed"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/ProtonMail/go-crypto/openpgp"
)

// KubernetesPackages installs the kubelet of the cluster's version from
// the Kubernetes package repository, as kubeadm's install guide does on
// Debian and Ubuntu: the repository of the version's minor release (an apt
// repository of pkgs.k8s.io's flat layout, "deb URL /"), trusted only with
// RepoKey (written to KeyringPath, named by the source's signed-by), the
// kubelet package of exactly that version, held (apt-mark hold), and
// containerd from the image's own repositories, configured with the
// systemd cgroup driver (ContainerdConfig) and restarted before the agent
// starts. apt only: RPM images are not served by this path.
type KubernetesPackages struct {
	// Version is the kubelet's, vMAJOR.MINOR.PATCH (the cluster's).
	Version string
	// RepoURL is the apt repository; empty: DefaultKubernetesRepo(Version).
	// A mirror must keep pkgs.k8s.io's layout (Release and Packages at the
	// URL itself).
	RepoURL string
	// RepoKey is the ASCII-armored OpenPGP public key that signs the
	// repository's Release file; empty: PkgsK8sIOKey.
	RepoKey string
}

// PkgsK8sIOKey is the key that signs pkgs.k8s.io's repositories (every
// minor release's: one key), "isv:kubernetes OBS Project
// <isv:kubernetes@build.opensuse.org>", fingerprint
// DE15 B144 86CD 377B 9E87 6E1A 2346 54DA 9A29 6436, as the Kubernetes
// docs name it. pkgs.k8s.io serves it as .../deb/Release.key; this copy is
// the one devantler-tech/ksail pins (pkg/svc/bootstrap/kubeadm/
// kubernetes-apt-keyring.asc, commit 80f9ea3, July 2026), identical to
// other public copies of Release.key, checked with gpg --show-keys. Its
// self-signature of 2024-10-20 makes it expire on 2026-12-29: the
// repository's owners extend the expiry before that (they did in October
// 2024), and this copy must then be replaced by the re-signed one
// (docs/join.md). TestPinnedKey checks the fingerprint.
//
//go:embed pkgs-k8s-io-release.asc
var PkgsK8sIOKey string

// PkgsK8sIOFingerprint is PkgsK8sIOKey's fingerprint.
const PkgsK8sIOFingerprint = "DE15B14486CD377B9E876E1A234654DA9A296436"

// Files the Kubernetes package path writes: the repository's key and
// source where kubeadm's guide puts them (an armored key, which apt reads
// itself as a .asc keyring: no gpg is needed on the machine), and
// containerd's configuration.
const (
	KeyringPath          = "/etc/apt/keyrings/kubernetes-apt-keyring.asc"
	SourcesPath          = "/etc/apt/sources.list.d/kubernetes.list"
	ContainerdConfigPath = "/etc/containerd/config.toml"
)

// ContainerdConfig is containerd's configuration on a node of the
// Kubernetes package path: the CRI plugin's runc runtime with the systemd
// cgroup driver, as the kubelet's cgroupDriver: systemd (the agent's
// default) wants. Config version 2 is what containerd 1.6 (Debian 12) and
// 1.7 (Debian 13, Ubuntu 24.04) read, and containerd 2 migrates it;
// everything not set here keeps containerd's defaults, as kubeadm's guide
// gets from `containerd config default` (the CNI binaries in /opt/cni/bin,
// where network add-ons install them).
const ContainerdConfig = `# Written by mooring's user-data (Kubernetes package path): the systemd
# cgroup driver, as the kubelet is configured. Other settings: containerd's
# defaults.
version = 2

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
  SystemdCgroup = true
`

var kubernetesVersionRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)

// ValidKubernetesVersion reports whether v is a release version,
// vMAJOR.MINOR.PATCH.
func ValidKubernetesVersion(v string) bool { return kubernetesVersionRE.MatchString(v) }

// DefaultKubernetesRepo is pkgs.k8s.io's stable repository of version's
// minor release.
func DefaultKubernetesRepo(version string) string {
	m := kubernetesVersionRE.FindStringSubmatch(version)
	if m == nil {
		return ""
	}
	return fmt.Sprintf("https://pkgs.k8s.io/core:/stable:/v%s.%s/deb/", m[1], m[2])
}

// KubeletPackage is apt's name=version of the kubelet of version: every
// package revision of it (pkgs.k8s.io numbers them 1.36.3-1.1; the glob
// is what kubeadm's upgrade guide installs).
func KubeletPackage(version string) string {
	return "kubelet=" + strings.TrimPrefix(version, "v") + "-*"
}

// RepoKey describes a repository key CheckRepoKey accepted.
type RepoKey struct {
	// Fingerprints of its primary keys, upper-case hex.
	Fingerprints []string
	// Expires is the earliest expiry of its primary keys; zero: never.
	Expires time.Time
}

// CheckRepoKey parses an ASCII-armored OpenPGP public key (one or more)
// and refuses what apt could not verify a repository with at time now:
// secret keys, revoked or expired keys, keys without a signing key.
func CheckRepoKey(armored string, now time.Time) (RepoKey, error) {
	if !strings.Contains(armored, "-----BEGIN PGP PUBLIC KEY BLOCK-----") {
		return RepoKey{}, errors.New("not an ASCII-armored OpenPGP public key (-----BEGIN PGP PUBLIC KEY BLOCK-----)")
	}
	list, err := openpgp.ReadArmoredKeyRing(strings.NewReader(armored))
	if err != nil {
		return RepoKey{}, fmt.Errorf("not an OpenPGP public key: %w", err)
	}
	if len(list) == 0 {
		return RepoKey{}, errors.New("no key in it")
	}
	var rk RepoKey
	for _, e := range list {
		fp := strings.ToUpper(fmt.Sprintf("%x", e.PrimaryKey.Fingerprint))
		if e.PrivateKey != nil {
			return RepoKey{}, fmt.Errorf("key %s is a secret key; give the public key", fp)
		}
		sig, _ := e.PrimarySelfSignature()
		if sig == nil {
			return RepoKey{}, fmt.Errorf("key %s has no valid self-signature", fp)
		}
		if sig.KeyLifetimeSecs != nil && *sig.KeyLifetimeSecs != 0 {
			exp := e.PrimaryKey.CreationTime.Add(time.Duration(*sig.KeyLifetimeSecs) * time.Second)
			if rk.Expires.IsZero() || exp.Before(rk.Expires) {
				rk.Expires = exp
			}
			if !now.Before(exp) {
				return RepoKey{}, fmt.Errorf("key %s expired on %s: apt refuses the repository (EXPKEYSIG); give the repository's current key", fp, exp.UTC().Format(time.DateOnly))
			}
		}
		if e.Revoked(now) {
			return RepoKey{}, fmt.Errorf("key %s is revoked", fp)
		}
		if _, ok := e.SigningKey(now); !ok {
			return RepoKey{}, fmt.Errorf("key %s has no usable signing key", fp)
		}
		rk.Fingerprints = append(rk.Fingerprints, fp)
	}
	return rk, nil
}

// checkRepoURL admits an http(s) URL that is one word of an apt source
// line.
func checkRepoURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("repository %q: want an http(s) URL", s)
	}
	if strings.ContainsAny(s, " \t\r\n[]#") {
		return fmt.Errorf("repository %q: spaces, brackets and # cannot be in an apt source", s)
	}
	return nil
}

// check validates k at time now and fills in the defaults.
func (k *KubernetesPackages) check(now time.Time) error {
	var errs []error
	if !ValidKubernetesVersion(k.Version) {
		errs = append(errs, fmt.Errorf("the Kubernetes version %q: want vMAJOR.MINOR.PATCH", k.Version))
	}
	if k.RepoURL == "" {
		k.RepoURL = DefaultKubernetesRepo(k.Version)
	} else if err := checkRepoURL(k.RepoURL); err != nil {
		errs = append(errs, err)
	} else if !strings.HasSuffix(k.RepoURL, "/") {
		// The repository's files are at the URL's path, a directory.
		k.RepoURL += "/"
	}
	if k.RepoKey == "" {
		k.RepoKey = PkgsK8sIOKey
	}
	if _, err := CheckRepoKey(k.RepoKey, now); err != nil {
		errs = append(errs, fmt.Errorf("repository key: %w", err))
	}
	return errors.Join(errs...)
}

// files are what the package path writes: the repository's key and
// source (before cloud-init's packages module runs apt-get update), and
// containerd's configuration, deferred to after the packages are
// installed (over the file the package may ship).
func (k *KubernetesPackages) files() []file {
	return []file{
		{Path: KeyringPath, Permissions: "0644", Content: strings.TrimSpace(k.RepoKey) + "\n"},
		{Path: SourcesPath, Permissions: "0644", Content: fmt.Sprintf(
			"# The Kubernetes package repository (mooring's user-data), trusted only with its own key.\ndeb [signed-by=%s] %s /\n", KeyringPath, k.RepoURL)},
		{Path: ContainerdConfigPath, Permissions: "0644", Content: ContainerdConfig, Defer: true},
	}
}

// script is the shell the package path runs before the agent is
// installed: the kubelet of the version is there, it is held, and
// containerd runs with its new configuration.
func (k *KubernetesPackages) script() string {
	want := "Kubernetes " + k.Version
	return strings.Join([]string{
		`v=$(kubelet --version 2>&1) || fail "no kubelet: the packages did not install (see apt's output above): $v"`,
		fmt.Sprintf(`[ "$v" = %s ] || fail "kubelet --version says \"$v\", want %s"`, shellQuote(want), want),
		`apt-mark hold kubelet`,
		`systemctl restart containerd.service || fail "containerd did not restart with ` + ContainerdConfigPath + `"`,
	}, "\n")
}
