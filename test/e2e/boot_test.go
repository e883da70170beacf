package e2e

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooring-dev/mooring/agent/cloudinit"
	"github.com/mooring-dev/mooring/cloud/azure/azuretest"
	"github.com/mooring-dev/mooring/cloud/tpm"
	"github.com/mooring-dev/mooring/cloud/tpm/tpmtest"
	"github.com/mooring-dev/mooring/internal/csrreason"
	"github.com/mooring-dev/mooring/test/harness"
	"github.com/mooring-dev/mooring/test/testbed"
)

// Booted machines: runc containers with system-mode systemd as PID 1 over
// an overlay of the host's "/" (test/harness/boot), in which Debian's
// cloud-init runs the user-data `mooring-agent user-data` prints for the
// machine's cloud. Nothing is laid out for the machine: cloud-init writes
// the agent's config, CA and token, downloads the agent (checking its
// digest), installs the shipped units and enables the agent, which joins
// and starts the kubelet.

// bootTimes collects each booted machine's container start to Node Ready,
// for the median the last boot test reports.
var bootTimes struct {
	sync.Mutex
	d []time.Duration
}

func recordBootTime(t *testing.T, name string, d time.Duration) {
	t.Helper()
	bootTimes.Lock()
	bootTimes.d = append(bootTimes.d, d)
	all := slices.Clone(bootTimes.d)
	bootTimes.Unlock()
	t.Logf("BOOT-TO-READY %s: %v (median of the %d machines booted so far: %v)", name, d.Round(10*time.Millisecond), len(all),
		median(all).Round(10*time.Millisecond))
}

// median of durations (the mean of the middle two of an even count).
func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return (s[(len(s)-1)/2] + s[len(s)/2]) / 2
}

// checkBooted checks what a booted machine shows once its Node is Ready:
// cloud-init done without errors, the agent and kubelet units active, the
// agent's STATUS lines in the machine's journal, both of the node's
// certificates approved by mooring.
func checkBooted(ctx context.Context, t *testing.T, c *testbed.Cluster, m *harness.Booted) {
	t.Helper()
	status, err := m.CloudInitStatus(ctx)
	if err != nil || !strings.Contains(status, "status: done") || strings.Contains(status, "error") && !strings.Contains(status, "errors: []") {
		t.Errorf("machine %s: cloud-init status --long: %v\n%s", m.Name, err, status)
	}
	if out, err := m.Exec(ctx, "systemctl", "is-active", "mooring-agent", "kubelet"); err != nil || out != "active\nactive\n" {
		t.Errorf("machine %s: systemctl is-active mooring-agent kubelet: %v: %q", m.Name, err, out)
	}
	journal, err := m.Journal(ctx, "mooring-agent")
	if err != nil || !strings.Contains(journal, `"Status" status="reading the instance metadata"`) ||
		!strings.Contains(journal, `status="node `+m.NodeName+` joined; kubelet.service started"`) {
		t.Errorf("machine %s: the agent's journal lacks its STATUS lines (%v):\n%s", m.Name, err, journal)
	}
	servingApprovedByMooring(ctx, t, c, m.NodeName)
	clientApproval(ctx, t, c, m.NodeName)
}

// bootAndCheck boots the machines and checks each as checkBooted does,
// recording its boot-to-Ready time.
func bootAndCheck(ctx context.Context, t *testing.T, c *testbed.Cluster, opts harness.BootOptions) *harness.BootFleet {
	t.Helper()
	f := harness.BootMachines(ctx, t, c, opts)
	for _, m := range f.Machines {
		d, err := m.WaitReady(ctx, c, 3*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(opts.Packages, m.Name) {
			// apt's time on top: not in the median of the others.
			t.Logf("BOOT-TO-READY %s, its kubelet installed from packages: %v (not in the median)", m.Name, d.Round(10*time.Millisecond))
			continue
		}
		recordBootTime(t, m.Name, d)
	}
	for _, m := range f.Machines {
		checkBooted(ctx, t, c, m)
	}
	return f
}

// clientCSRs counts the node's client CSRs (the agent's).
func clientCSRs(ctx context.Context, t *testing.T, c *testbed.Cluster, node string) int {
	t.Helper()
	list, err := c.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, csr := range list.Items {
		if csr.Spec.SignerName == certificatesv1.KubeAPIServerClientKubeletSignerName && strings.HasPrefix(csr.Name, "mooring-"+node+"-") {
			n++
		}
	}
	return n
}

// bootBins are the binaries the boot tests run, built once for them all.
type bootBins struct{ agent, ccm, approver, cloud string }

// TestBootedMachines boots machines on every cloud backend, one bed each,
// one after another: their boot-to-Ready times (container start to Node
// Ready) are reported as BOOT-TO-READY lines and their median at the end
// (docs/join.md).
func TestBootedMachines(t *testing.T) {
	bins := bootBins{
		agent:    harness.BuildBinary(t, "agent/cmd/mooring-agent"),
		ccm:      harness.BuildBinary(t, "ccm/cmd/mooring-ccm"),
		approver: harness.BuildBinary(t, "csrapprover/cmd/mooring-csr-approver"),
		cloud:    harness.BuildBinary(t, "cloud/local/cmd/mooring-localcloud"),
	}
	t.Run("local", func(t *testing.T) { bootOnLocalCloud(t, bins) })
	t.Run("cloud-down", func(t *testing.T) { bootWhileTheCloudIsDown(t, bins) })
	// The AWS machine's image has no kubelet: its user-data installs it
	// from a Kubernetes package repository (--kubernetes-version). Its
	// instance has NitroTPM (EC2 reports its TPM's EK), the approver
	// requires TPM evidence: the join takes the credential activation
	// round (checkActivationRound); awsTPMRequired's attacks are denied.
	t.Run("aws", func(t *testing.T) {
		var aws *harness.AWSCloud
		start := func(tb testing.TB) *harness.AWSCloud { aws = harness.StartAWSCloud(tb); return aws }
		c := bootOnCloud(t, bins, start, joinOptions{ApproverArgs: []string{"--tpm=required"}, TPM: true}, true)
		awsTPMRequired(t, c, aws, "boot-aws")
	})
	// A Shielded VM: its vTPM provisioned as GCE's (the AK template and
	// the AK certificate naming the instance in NV), the approver requiring
	// TPM evidence.
	t.Run("gce", func(t *testing.T) {
		var gce *harness.GCECloud
		start := func(tb testing.TB) *harness.GCECloud { gce = harness.StartGCECloud(tb); return gce }
		c := bootOnCloud(t, bins, start, joinOptions{ApproverArgs: []string{"--tpm=required"}, TPM: true}, false)
		gceTPMRequired(t, c, gce, "boot-gce")
	})
	// A Trusted Launch VM: its vTPM provisioned as Azure's (an AK and its
	// certificate naming the VM), the approver requiring TPM evidence.
	t.Run("azure", func(t *testing.T) {
		var az *harness.AzureCloud
		start := func(tb testing.TB) *harness.AzureCloud {
			// No IMDS document cache: azureTPMRequired asks the booted
			// VM's IMDS twice in a row, which the cache would answer
			// with a stale document, 3 s of the agent's retries.
			az = harness.StartAzureCloudWith(tb, azuretest.Options{DocumentCacheWindow: -1})
			az.TrustedLaunch = true
			return az
		}
		c := bootOnCloud(t, bins, start, joinOptions{ApproverArgs: []string{"--tpm=required"}, TPM: true}, false)
		azureTPMRequired(t, c, az, "boot-azure")
	})
	// A ticket cloud: the user-data carries the server's join ticket
	// (--join-ticket-file).
	t.Run("hetzner", func(t *testing.T) {
		tickets := harness.NewTicketIssuer(t)
		bootOnCloud(t, bins, func(tb testing.TB) *harness.HetznerCloud { return harness.StartHetznerCloud(tb, tickets) },
			joinOptions{ApproverArgs: tickets.ApproverArgs(), CCMArgs: tickets.CCMArgs()}, false)
	})
	bootTimes.Lock()
	all := slices.Clone(bootTimes.d)
	bootTimes.Unlock()
	if len(all) > 0 {
		slices.Sort(all)
		t.Logf("BOOT-TO-READY median of %d machines: %v (min %v, max %v)", len(all), median(all).Round(10*time.Millisecond),
			all[0].Round(10*time.Millisecond), all[len(all)-1].Round(10*time.Millisecond))
	}
}

// localBed is a bed with the local cloud and mooring-ccm approving.
func localBed(t *testing.T, bins bootBins) (context.Context, *testbed.Cluster, *harness.LocalCloud) {
	t.Helper()
	c := testbed.Start(t, testbed.Options{RBAC: testbed.BootstrapRBAC{MooringApproves: true}})
	lc := harness.StartLocalCloud(t, c, bins.cloud)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	for _, f := range []string{"deploy/csrapprover/role/clusterrole.yaml", "deploy/base/ccm-csrapprover-binding.yaml"} {
		if err := c.Apply(ctx, filepath.Join(harness.RepoRoot(), f)); err != nil {
			t.Fatal(err)
		}
	}
	harness.StartCCM(t, c, bins.ccm, lc, harness.CCMOptions{Cluster: e2eCluster, Args: []string{"--controllers=*,csr-approver", "--v=2"}})
	return ctx, c, lc
}

// bootOnLocalCloud boots two local cloud machines, one
// of them with kubeadm's kubelet drop-in installed as the Kubernetes
// packages install it: its kubelet runs with the flags of both drop-ins.
// Their agent comes from a release, as an operator's does: hack/release.sh
// (make release) makes one, served on loopback as a release download; its
// agent renders the user-data with --version, which takes the agent's URL
// and digest from the release's SHA256SUMS, and cloud-init downloads the
// release's binary. Then the other reboots (its container stopped and
// started again on the same disk): the agent runs again, keeps the
// kubelet's credentials, the Node is Ready again and no new client CSR is
// filed.
func bootOnLocalCloud(t *testing.T, bins bootBins) {
	release := harness.BuildRelease(t, "mooring-agent")
	ctx, c, lc := localBed(t, bins)
	f := bootAndCheck(ctx, t, c, harness.BootOptions{Names: []string{"boot-1", "boot-kubeadm"}, Cluster: e2eCluster,
		AgentBin: bins.agent, Local: lc, Kubeadm: []string{"boot-kubeadm"}, Release: release, TPM: []string{"boot-1"}})
	asset := "mooring-agent_" + release.Version + "_linux_" + runtime.GOARCH
	sum, err := os.ReadFile(filepath.Join(release.Dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range f.Machines {
		if want := "url='" + f.ReleaseURL + "/" + release.Version + "/" + asset + "'"; !strings.Contains(string(m.UserData), want) {
			t.Errorf("machine %s: the user-data does not download %s:\n%s", m.Name, want, m.UserData)
		}
		out, err := m.Exec(ctx, "sha256sum", cloudinit.AgentBin)
		if digest, _, _ := strings.Cut(out, " "); err != nil || len(digest) != 64 || !strings.Contains(string(sum), digest+"  "+asset+"\n") {
			t.Errorf("machine %s: its agent is not the release's %s (%v): %s", m.Name, asset, err, out)
		}
		if out, err := m.Exec(ctx, cloudinit.AgentBin, "--version"); err != nil || !strings.HasPrefix(out, "mooring-agent "+release.Version+" ") {
			t.Errorf("machine %s: mooring-agent --version: %v: %q, want the release's %s", m.Name, err, out, release.Version)
		}
	}
	// kubeadm's drop-in and mooring's, together: flags of both files.
	km := f.Machines[1]
	cmdline, err := km.Exec(ctx, "sh", "-c", `tr '\0' ' ' < /proc/$(systemctl show -P MainPID kubelet)/cmdline`)
	if err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",        // 10-kubeadm.conf
		"--container-runtime-endpoint=unix:///run/containerd/containerd.sock",  // kubeadm-flags.env
		"--config-dir=/etc/kubernetes/kubelet.conf.d",                          // /etc/default/kubelet
		"--cloud-provider=external", "--provider-id=local://" + km.Instance.ID, // 20-mooring.conf, kubelet.env
		"--hostname-override=" + km.NodeName, "--cert-dir=/var/lib/kubelet/pki", // 20-mooring.conf
	} {
		if !strings.Contains(cmdline, flag+" ") {
			t.Errorf("kubeadm machine's kubelet: no %s in %s", flag, cmdline)
		}
	}
	if dropIns, err := km.Exec(ctx, "systemctl", "show", "-P", "DropInPaths", "kubelet"); err != nil ||
		!strings.Contains(dropIns, "10-kubeadm.conf") || !strings.Contains(dropIns, "20-mooring.conf") {
		t.Errorf("kubeadm machine's kubelet drop-ins: %v %s", err, dropIns)
	}

	// boot-1 has a TPM (a simulator on the host, its socket's directory
	// bind-mounted): the machine sees the socket, the user-data named it
	// as tpmDevice, and the TPM answers (its EK, as a cloud would read
	// it). The local backend names no TPM key: the join was its evidence
	// alone.
	tm := f.Machines[0]
	if out, err := tm.Exec(ctx, "sh", "-c", "test -S "+harness.TPMDevice+" && grep -Fx 'tpmDevice: "+harness.TPMDevice+"' /etc/mooring/agent.yaml"); err != nil {
		t.Errorf("machine %s: its TPM socket or tpmDevice: %v\n%s", tm.Name, err, out)
	}
	if _, err := tm.TPM.EKPublic(); err != nil {
		t.Errorf("machine %s: its TPM's EK: %v", tm.Name, err)
	}

	// A reboot.
	m := f.Machines[0]
	before := clientCSRs(ctx, t, c, m.NodeName)
	if err := m.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := m.WaitReady(ctx, c, 2*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("machine %s rebooted: Node Ready again %v after its container started", m.Name, d.Round(10*time.Millisecond))
	if out, err := m.Exec(ctx, "systemctl", "is-active", "mooring-agent", "kubelet"); err != nil || out != "active\nactive\n" {
		t.Errorf("after the reboot: systemctl is-active mooring-agent kubelet: %v: %q", err, out)
	}
	// The host's kernel gives both boots one boot id: the agent's runs are
	// told apart by its lines.
	journal, err := m.Journal(ctx, "mooring-agent")
	if err != nil || strings.Count(journal, `"Status" status="reading the instance metadata"`) != 2 ||
		!strings.Contains(journal, "Kubelet credentials are valid; skipping the join") {
		t.Errorf("after the reboot, the agent did not run again keeping the kubelet's credentials (%v):\n%s", err, journal)
	}
	if after := clientCSRs(ctx, t, c, m.NodeName); after != before {
		t.Errorf("%s: %d client CSRs before the reboot, %d after", m.NodeName, before, after)
	}
}

// bootWhileTheCloudIsDown boots a machine while its cloud (the
// local cloud's API and metadata service) is down for 30 s: cloud-init
// finishes all the same, the agent waits with a STATUS that says why, and
// the machine joins once the cloud is back.
func bootWhileTheCloudIsDown(t *testing.T, bins bootBins) {
	ctx, c, lc := localBed(t, bins)
	// boot-bad-digest boots beside it with user-data whose agent digest
	// is wrong (badDigest checks it).
	f := harness.BootMachines(ctx, t, c, harness.BootOptions{Names: []string{"boot-outage", "boot-bad-digest"}, Cluster: e2eCluster, AgentBin: bins.agent, Local: lc,
		Before: lc.Kill, UserDataArgs: map[string][]string{"boot-bad-digest": {"--agent-sha256=" + strings.Repeat("0", 64)}}})
	badDigest(ctx, t, f, f.Machines[1])
	m := f.Machines[0]
	down := time.Now()
	status, err := m.CloudInitStatus(ctx)
	if err != nil || !strings.Contains(status, "status: done") {
		t.Fatalf("cloud-init while the cloud is down: %v\n%s", err, status)
	}
	t.Logf("cloud-init done %v after the container started, the cloud down", time.Since(m.StartedAt()).Round(10*time.Millisecond))
	var text string
	harness.WaitUntil(ctx, t, "the agent's STATUS says it waits for the metadata", func() (bool, error) {
		out, err := m.Exec(ctx, "systemctl", "show", "-P", "StatusText", "mooring-agent")
		text = strings.TrimSpace(out)
		return err == nil && strings.HasPrefix(text, "instance metadata failed, retrying in "), nil
	})
	t.Logf("the agent's STATUS while the cloud is down: %q", text)
	if out, _ := m.Exec(ctx, "systemctl", "is-active", "mooring-agent"); strings.TrimSpace(out) != "activating" {
		t.Errorf("the agent unit is %q while it waits, want activating", out)
	}
	time.Sleep(time.Until(down.Add(30 * time.Second)))
	if err := lc.Start(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	if _, err := m.WaitReady(ctx, c, 3*time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Logf("the cloud back after %v; Node %s Ready %v later", back.Sub(down).Round(time.Second), m.NodeName, time.Since(back).Round(10*time.Millisecond))
	checkBooted(ctx, t, c, m)
	journal, _ := m.Journal(ctx, "mooring-agent")
	if !strings.Contains(journal, "instance metadata failed, retrying in") {
		t.Errorf("the agent's journal lacks its waiting STATUS:\n%s", journal)
	}
}

// bootOnCloud boots one machine on a cloud's instance, with the cloud's
// mooring-ccm and standalone approver running. With packages, the
// machine's image has no kubelet and no apt sources: its user-data adds a
// Kubernetes package repository served on loopback (a kubelet package of
// the bed's version, signed with a test key given as --kubernetes-repo-key)
// and installs from it (checkPackages). It returns the bed, which the
// test's cleanup stops.
func bootOnCloud[P provisioningCloud](t *testing.T, bins bootBins, startCloud func(testing.TB) P, opts joinOptions, packages bool) *testbed.Cluster {
	c := testbed.Start(t, testbed.Options{RBAC: testbed.BootstrapRBAC{MooringApproves: true}})
	cloud := startCloud(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	harness.StartCCM(t, c, bins.ccm, cloud, harness.CCMOptions{Cluster: e2eCluster, Args: append([]string{"--v=2"}, opts.CCMArgs...)})
	harness.StartApprover(t, c, bins.approver, cloud, e2eCluster, opts.ApproverArgs...)
	name := "boot-" + cloud.ProviderName()
	bo := harness.BootOptions{Names: []string{name}, Cluster: e2eCluster, AgentBin: bins.agent, Provision: cloud.Provisioner(e2eCluster)}
	if opts.TPM {
		tc, ok := any(cloud).(tpmCloud)
		if !ok {
			t.Fatalf("the %s harness provisions no TPM", cloud.ProviderName())
		}
		bo.TPM, bo.ProvisionTPM = []string{name}, tc.ProvisionTPM
	}
	var repo *harness.KubeletRepo
	if packages {
		start := time.Now()
		repo = harness.ServeKubeletRepo(t, c.Binaries().Kubelet, testbed.KubeVersion)
		t.Logf("kubelet package repository built and served at %s in %v", repo.URL, time.Since(start).Round(10*time.Millisecond))
		bo.Packages, bo.UserDataArgs = []string{name}, map[string][]string{name: repo.UserDataArgs()}
	}
	f := bootAndCheck(ctx, t, c, bo)
	m := f.Machines[0]
	if repo != nil {
		checkPackages(ctx, t, m, repo)
	}
	if cfg, err := m.Exec(ctx, "cat", "/etc/mooring/agent.yaml"); err != nil || !strings.Contains(cfg, "cloud: "+cloud.ProviderName()+"\n") {
		t.Errorf("machine %s: the agent config cloud-init wrote (%v):\n%s", m.Name, err, cfg)
	}
	if opts.TPM {
		if msg := clientApproval(ctx, t, c, m.NodeName); !strings.Contains(msg, "TPM-proven") {
			t.Errorf("machine %s: the client CSR was approved without its TPM: %q", m.Name, msg)
		}
	}
	if opts.TPM && cloud.ProviderName() == "aws" {
		checkActivationRound(ctx, t, c, m)
	}
	t.Logf("machine %s (%s instance, Node %s) booted and joined", m.Name, cloud.ProviderName(), m.NodeName)
	return c
}

// checkActivationRound checks a join whose AK the approver proved by
// credential activation (AWS's NitroTPM): two client CSRs of the node, the
// first denied TPMCredentialChallenge with the challenge written on it,
// the second approved. It logs what the round took, from the agent's
// journal: its first quote to its answer (the round the activation adds),
// and its answer to the join.
func checkActivationRound(ctx context.Context, t *testing.T, c *testbed.Cluster, m *harness.Booted) {
	t.Helper()
	list, err := c.Client.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var challenged, approved []string
	for _, csr := range list.Items {
		if csr.Spec.SignerName != certificatesv1.KubeAPIServerClientKubeletSignerName || !strings.HasPrefix(csr.Name, "mooring-"+m.NodeName+"-") {
			continue
		}
		for _, cond := range csr.Status.Conditions {
			switch {
			case cond.Type == certificatesv1.CertificateDenied && cond.Reason == csrreason.TPMChallenge && csr.Annotations[tpm.ChallengeAnnotation] != "":
				challenged = append(challenged, csr.Name)
			case cond.Type == certificatesv1.CertificateApproved:
				approved = append(approved, csr.Name)
			}
		}
	}
	if len(challenged) != 1 || len(approved) != 1 {
		t.Errorf("node %s: client CSRs challenged %v and approved %v; want one of each (the credential activation round)", m.NodeName, challenged, approved)
		return
	}
	journal, err := m.Journal(ctx, "mooring-agent")
	if err != nil {
		t.Fatal(err)
	}
	quoted, answered, joined := journalTime(journal, "asking the TPM at"), journalTime(journal, "Answering the approver's credential activation challenge"),
		journalTime(journal, "status=\"node "+m.NodeName+" joined")
	if quoted.IsZero() || answered.IsZero() || joined.IsZero() {
		t.Errorf("node %s: the agent's journal lacks its quote, answer or join lines:\n%s", m.NodeName, journal)
		return
	}
	t.Logf("node %s: CSR %s challenged (credential activation), %s approved TPM-proven; the agent's first quote to its answer %v, its answer to joined %v",
		m.NodeName, challenged[0], approved[0], answered.Sub(quoted).Round(time.Millisecond), joined.Sub(answered).Round(time.Millisecond))
}

// journalTime is the time of the first klog line of journal holding what
// (zero when none).
func journalTime(journal, what string) time.Time {
	for _, line := range strings.Split(journal, "\n") {
		if strings.Contains(line, what) {
			if at, err := klogTime(line); err == nil {
				return at
			}
		}
	}
	return time.Time{}
}

// tpmCloud is a cloud stand-in that provisions a booted machine's TPM as
// its cloud provisions a vTPM (BootOptions.ProvisionTPM).
type tpmCloud interface {
	ProvisionTPM(ctx context.Context, name string, p harness.Provisioned, sim *tpmtest.Sim) error
}

// checkPackages checks what the user-data's package steps left on a
// machine of the package path: the kubelet of the repository's package,
// held, with the package's kubelet.service; containerd's configuration
// with the systemd cgroup driver, which containerd (the stand-in loads it
// with the image's real containerd at each start) read when the
// user-data restarted it; and apt reached only that repository.
func checkPackages(ctx context.Context, t *testing.T, m *harness.Booted, repo *harness.KubeletRepo) {
	t.Helper()
	for _, c := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"apt-mark", "showhold"}, "kubelet\n"},
		// "hi": held, installed.
		{[]string{"dpkg-query", "-W", "-f=${Version} ${db:Status-Abbrev}", "kubelet"}, repo.Package + " hi "},
		{[]string{"dpkg-query", "-S", "/usr/bin/kubelet"}, "kubelet: /usr/bin/kubelet\n"},
		{[]string{"kubelet", "--version"}, "Kubernetes " + repo.Version + "\n"},
		{[]string{"sh", "-c", `readlink -f "$(systemctl show -P FragmentPath kubelet)"`}, "/usr/lib/systemd/system/kubelet.service\n"},
		{[]string{"dpkg-query", "-S", "/usr/lib/systemd/system/kubelet.service"}, "kubelet: /usr/lib/systemd/system/kubelet.service\n"},
		{[]string{"cat", cloudinit.ContainerdConfigPath}, cloudinit.ContainerdConfig},
	} {
		if out, err := m.Exec(ctx, c.cmd...); err != nil || out != c.want {
			t.Errorf("machine %s: %s: %v: %q, want %q", m.Name, strings.Join(c.cmd, " "), err, out, c.want)
		}
	}
	// containerd's journal: the configuration it made of the file at its
	// last start (the user-data's restart).
	journal, err := m.Journal(ctx, "containerd")
	last := journal[max(0, strings.LastIndex(journal, "\nversion = 2\n")):]
	if _, opts, ok := strings.Cut(last, `[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]`); err != nil || !ok ||
		!strings.Contains(strings.SplitN(opts, "\n\n", 2)[0], "SystemdCgroup = true") {
		t.Errorf("machine %s: containerd did not load the systemd cgroup driver at its last start (%v):\n%s", m.Name, err, journal)
	}
	// apt fetched from the repository only.
	log, err := m.Exec(ctx, "cat", "/var/log/cloud-init-output.log")
	fetched := 0
	for _, line := range strings.Split(log, "\n") {
		for _, p := range []string{"Hit:", "Get:", "Ign:", "Err:"} {
			if strings.HasPrefix(line, p) {
				fetched++
				if !strings.Contains(line, strings.TrimSuffix(repo.URL, "/")) {
					t.Errorf("machine %s: apt fetched from elsewhere than the repository: %s", m.Name, line)
				}
			}
		}
	}
	if err != nil || fetched == 0 {
		t.Errorf("machine %s: no apt fetch from the repository in cloud-init's output (%v):\n%s", m.Name, err, log)
	}
	t.Logf("machine %s: kubelet %s installed from %s and held; containerd configured with SystemdCgroup = true", m.Name, repo.Package, repo.URL)
}

// badDigest checks a machine whose user-data names another digest than
// the agent's: the boot fails visibly (cloud-init's status is error, its
// output names the URL and both digests) and the agent is neither
// installed nor enabled, so no unit restarts on a missing binary.
func badDigest(ctx context.Context, t *testing.T, f *harness.BootFleet, m *harness.Booted) {
	t.Helper()
	status, _ := m.CloudInitStatus(ctx) // exits 1 on error
	if !strings.Contains(status, "status: error") {
		t.Errorf("machine %s: cloud-init status --long after a wrong agent digest:\n%s", m.Name, status)
	}
	t.Logf("machine %s: cloud-init status --long after a wrong agent digest:\n%s", m.Name, status)
	want := "mooring: the agent from " + f.AgentURL + " has SHA-256 " + f.AgentSHA256 + ", want " + strings.Repeat("0", 64) +
		": not installed; mooring-agent.service is not enabled"
	if out, err := m.Exec(ctx, "cat", "/var/log/cloud-init-output.log"); err != nil || !strings.Contains(out, want+"\n") {
		t.Errorf("machine %s: cloud-init's output lacks %q (%v):\n%s", m.Name, want, err, out)
	}
	if out, _ := m.Exec(ctx, "systemctl", "is-enabled", "mooring-agent"); strings.TrimSpace(out) != "disabled" {
		t.Errorf("machine %s: mooring-agent.service is %q, want disabled", m.Name, out)
	}
	if out, _ := m.Exec(ctx, "systemctl", "is-active", "mooring-agent"); strings.TrimSpace(out) != "inactive" {
		t.Errorf("machine %s: mooring-agent.service is %q, want inactive", m.Name, out)
	}
	if _, err := m.Exec(ctx, "test", "!", "-e", cloudinit.AgentBin); err != nil {
		t.Errorf("machine %s: %s exists after a wrong digest", m.Name, cloudinit.AgentBin)
	}
}
