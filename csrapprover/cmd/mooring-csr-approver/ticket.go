package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mooring-dev/mooring/internal/ticket"
)

// keyStore is where the join ticket keys live: a Kubernetes Secret (what
// the approver mounts) or a directory of the same two files.
type keyStore interface {
	// load reads the key set; missing is true when there is none yet.
	load(ctx context.Context) (keys *ticket.KeySet, missing bool, err error)
	save(ctx context.Context, keys *ticket.KeySet) error
	String() string
}

type dirStore struct{ dir string }

func (d dirStore) String() string { return "directory " + d.dir }

// load: a directory without a key set document holds no keys yet; one
// with a broken or partial set is an error (never overwritten by a new set).
func (d dirStore) load(context.Context) (*ticket.KeySet, bool, error) {
	if _, err := os.Stat(filepath.Join(d.dir, ticket.KeysFile)); errors.Is(err, os.ErrNotExist) {
		return nil, true, nil
	}
	keys, err := ticket.ReadDir(d.dir)
	return keys, false, err
}

func (d dirStore) save(_ context.Context, keys *ticket.KeySet) error { return keys.WriteDir(d.dir) }

// secretStore updates the Secret with the resourceVersion it read, so two
// admins rotating at once cannot lose a key.
type secretStore struct {
	client          kubernetes.Interface
	namespace, name string
	read            *v1.Secret
}

func (s *secretStore) String() string { return "Secret " + s.namespace + "/" + s.name }

func (s *secretStore) load(ctx context.Context) (*ticket.KeySet, bool, error) {
	sec, err := s.client.CoreV1().Secrets(s.namespace).Get(ctx, s.name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	s.read = sec
	keys, err := ticket.ParseKeySet(sec.Data)
	return keys, false, err
}

func (s *secretStore) save(ctx context.Context, keys *ticket.KeySet) error {
	data, err := keys.Data()
	if err != nil {
		return err
	}
	if s.read == nil {
		_, err = s.client.CoreV1().Secrets(s.namespace).Create(ctx, &v1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.namespace, Name: s.name,
				Labels: map[string]string{"app.kubernetes.io/name": "mooring", "app.kubernetes.io/component": "join-ticket-keys"}},
			Type: v1.SecretTypeOpaque, Data: data,
		}, metav1.CreateOptions{})
		return err
	}
	sec := s.read.DeepCopy()
	sec.Data = data
	_, err = s.client.CoreV1().Secrets(s.namespace).Update(ctx, sec, metav1.UpdateOptions{})
	return err
}

// ticketOptions are the flags every ticket command shares.
type ticketOptions struct {
	keysDir    string
	keysSecret string
	kubeconfig string
	// newClient makes the Kubernetes client (tests replace it).
	newClient func(kubeconfig string) (kubernetes.Interface, error)
}

func (o *ticketOptions) store() (keyStore, error) {
	switch {
	case (o.keysDir == "") == (o.keysSecret == ""):
		return nil, errors.New("give exactly one of --keys-dir and --keys-secret")
	case o.keysDir != "":
		return dirStore{o.keysDir}, nil
	}
	ns, name, ok := strings.Cut(o.keysSecret, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("--keys-secret %q: want NAMESPACE/NAME", o.keysSecret)
	}
	client, err := o.newClient(o.kubeconfig)
	if err != nil {
		return nil, err
	}
	return &secretStore{client: client, namespace: ns, name: name}, nil
}

func newKubeClient(kubeconfig string) (kubernetes.Interface, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, err
	}
	cfg.UserAgent = "mooring-csr-approver-ticket"
	return kubernetes.NewForConfig(cfg)
}

// loadKeys reads the key set of the store the flags name, which must
// exist.
func (o *ticketOptions) loadKeys(ctx context.Context) (*ticket.KeySet, error) {
	st, err := o.store()
	if err != nil {
		return nil, err
	}
	keys, missing, err := st.load(ctx)
	switch {
	case err != nil:
		return nil, fmt.Errorf("%s: %w", st, err)
	case missing:
		return nil, fmt.Errorf("%s holds no join ticket keys yet: run `ticket keys add` first", st)
	}
	return keys, nil
}

// newTicketCommand is `mooring-csr-approver ticket`: issue join tickets and
// manage their keys (docs/tickets.md).
func newTicketCommand(newClient func(string) (kubernetes.Interface, error), now func() time.Time) *cobra.Command {
	o := &ticketOptions{newClient: newClient}
	cmd := &cobra.Command{
		Use:   "ticket",
		Short: "Issue join tickets for instances of clouds without signed identity, and manage the keys that sign them (docs/tickets.md)",
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&o.keysDir, "keys-dir", "", "directory of the join ticket keys ("+ticket.KeysFile+" and "+ticket.SigningKeyFile+")")
	pf.StringVar(&o.keysSecret, "keys-secret", "", "the Secret of the join ticket keys, NAMESPACE/NAME (the one the approver mounts)")
	pf.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig for --keys-secret (default: $KUBECONFIG, ~/.kube/config)")

	var name, cluster string
	var lifetime time.Duration
	issue := &cobra.Command{
		Use:   "issue --name NAME --cluster CLUSTER",
		Short: "Print a join ticket for the instance that will be created under NAME; put it into that instance's user-data",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			keys, err := o.loadKeys(cmd.Context())
			if err != nil {
				return err
			}
			tok, c, err := keys.Issue(name, cluster, now(), lifetime)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), tok)
			fmt.Fprintf(cmd.ErrOrStderr(), "ticket %s for instance %q of cluster %q, valid until %s; create the instance before then\n",
				c.ID, c.Name, c.Cluster, c.Expiry.Format(time.RFC3339))
			return nil
		},
	}
	issue.Flags().StringVar(&name, "name", "", "the name the instance will be created with (required)")
	issue.Flags().StringVar(&cluster, "cluster", "", "the cluster the instance joins: the approver's cluster tag (required)")
	issue.Flags().DurationVar(&lifetime, "lifetime", ticket.DefaultLifetime, fmt.Sprintf("how long the ticket is valid: the instance must be created and join within it (%s to %s)", ticket.MinLifetime, ticket.MaxLifetime))
	_ = issue.MarkFlagRequired("name")
	_ = issue.MarkFlagRequired("cluster")

	keysCmd := &cobra.Command{Use: "keys", Short: "Add, use, retire and list the join ticket keys"}
	change := func(use, short string, args cobra.PositionalArgs, f func(keys *ticket.KeySet, args []string, out io.Writer) error) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, Args: args, RunE: func(cmd *cobra.Command, args []string) error {
			st, err := o.store()
			if err != nil {
				return err
			}
			keys, missing, err := st.load(cmd.Context())
			if err != nil {
				return fmt.Errorf("%s: %w", st, err)
			}
			if missing {
				if use != "add" {
					return fmt.Errorf("%s holds no join ticket keys yet: run `ticket keys add` first", st)
				}
				keys = &ticket.KeySet{}
			}
			if err := f(keys, args, cmd.OutOrStdout()); err != nil {
				return err
			}
			if err := st.save(cmd.Context(), keys); err != nil {
				return fmt.Errorf("%s: %w", st, err)
			}
			return nil
		}}
	}
	keysCmd.AddCommand(
		change("add", "Add a new key that verifies tickets (and signs them if it is the first); print its kid", cobra.NoArgs,
			func(keys *ticket.KeySet, _ []string, out io.Writer) error {
				kid, err := keys.AddKey()
				if err == nil {
					fmt.Fprintln(out, kid)
				}
				return err
			}),
		change("sign KID", "Make KID the key that signs new tickets (once every approver has read it)", cobra.ExactArgs(1),
			func(keys *ticket.KeySet, args []string, _ io.Writer) error { return keys.Sign(args[0]) }),
		change("retire KID", "Remove a key that no longer signs: tickets it signed stop verifying", cobra.ExactArgs(1),
			func(keys *ticket.KeySet, args []string, _ io.Writer) error { return keys.Retire(args[0]) }),
		&cobra.Command{Use: "list", Short: "List the kids; the signing one is marked", Args: cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				keys, err := o.loadKeys(cmd.Context())
				if err != nil {
					return err
				}
				for _, kid := range keys.IDs() {
					mark := ""
					if kid == keys.SigningKey() {
						mark = "\tsigning"
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%s%s\n", kid, mark)
				}
				return nil
			}},
	)
	cmd.AddCommand(issue, keysCmd)
	return cmd
}
