package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/mooring-dev/mooring/cloud/local/api"
	"github.com/mooring-dev/mooring/cloud/local/client"
)

// clientFlags are the flags every client command has.
type clientFlags struct {
	fs        *flag.FlagSet
	url       *string
	tokenFile *string
	output    *string
	// tokenFrom says where client() took the token from ("" for none),
	// for the error when the API refuses it.
	tokenFrom string
}

func newClientFlags(name string) *clientFlags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	return &clientFlags{
		fs:        fs,
		url:       fs.String("url", os.Getenv("MOORING_LOCALCLOUD_URL"), "API URL (default $MOORING_LOCALCLOUD_URL)"),
		tokenFile: fs.String("token-file", "", "file holding the API token (default $MOORING_LOCALCLOUD_TOKEN)"),
		output:    fs.String("o", "table", "output: table or json"),
	}
}

// parse parses args and returns the positional arguments, which must number
// exactly want (or any number when want < 0).
func (c *clientFlags) parse(args []string, want int) ([]string, error) {
	// Flags may follow positional arguments: parse in rounds.
	var pos []string
	for {
		if err := c.fs.Parse(args); err != nil {
			return nil, err
		}
		if c.fs.NArg() == 0 {
			break
		}
		pos = append(pos, c.fs.Arg(0))
		args = c.fs.Args()[1:]
	}
	if want >= 0 && len(pos) != want {
		return nil, fmt.Errorf("want %d argument(s), got %d: %v", want, len(pos), pos)
	}
	if *c.output != "table" && *c.output != "json" {
		return nil, fmt.Errorf("-o must be table or json, not %q", *c.output)
	}
	return pos, nil
}

func (c *clientFlags) client() (*client.Client, error) {
	if *c.url == "" {
		return nil, errors.New("no API URL: set --url or $MOORING_LOCALCLOUD_URL")
	}
	token := strings.TrimSpace(os.Getenv(tokenEnv))
	c.tokenFrom = "$" + tokenEnv
	if *c.tokenFile != "" {
		b, err := os.ReadFile(*c.tokenFile)
		if err != nil {
			return nil, fmt.Errorf("--token-file: %w", err)
		}
		token = strings.TrimSpace(string(b))
		c.tokenFrom = "--token-file " + *c.tokenFile
	}
	if token == "" {
		c.tokenFrom = ""
	}
	return client.New(*c.url, token, nil)
}

// tokenEnv holds the API token of client commands (unless --token-file).
const tokenEnv = "MOORING_LOCALCLOUD_TOKEN"

// explain adds to an API error what the user can do about it: for a
// refused or missing token, where the token comes from.
func (c *clientFlags) explain(err error) error {
	if !client.IsCode(err, api.CodeUnauthorized) {
		return err
	}
	if c.tokenFrom == "" {
		return fmt.Errorf("%w: no API token given: set $%s, or --token-file FILE, to the token of the file serve's --token-file names", err, tokenEnv)
	}
	return fmt.Errorf("%w: the API refused the token from %s: it must be the token of the file serve's --token-file names", err, c.tokenFrom)
}

func ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

// call parses the flags (npos positional arguments), makes the client and
// a bounded context, and runs do.
func (f *clientFlags) call(args []string, npos int, do func(cx context.Context, c *client.Client, pos []string) error) error {
	pos, err := f.parse(args, npos)
	if err != nil {
		return err
	}
	c, err := f.client()
	if err != nil {
		return err
	}
	cx, cancel := ctx()
	defer cancel()
	return f.explain(do(cx, c, pos))
}

// print writes v as JSON, or as a table through table when -o table.
func (c *clientFlags) print(v any, table func(w io.Writer)) error {
	if *c.output == "json" || table == nil {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	table(w)
	return w.Flush()
}

func instanceTable(items ...api.Instance) func(io.Writer) {
	return func(w io.Writer) {
		fmt.Fprintln(w, "ID\tNAME\tSTATE\tZONE\tTYPE\tCLUSTER\tINTERNAL-IP\tEXTERNAL-IP\tMETADATA")
		for _, in := range items {
			var internal, external string
			for _, a := range in.Addresses {
				switch a.Type {
				case api.InternalIP:
					internal = a.Address
				case api.ExternalIP:
					external = a.Address
				}
			}
			metadata := in.MetadataURL
			if in.MetadataEndpoint == api.MetadataDisabled {
				metadata = "(disabled)"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", in.ID, in.Name, in.State, in.Zone,
				in.InstanceType, in.Cluster, internal, external, metadata)
		}
	}
}

// repeated is a flag that may be given many times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func instancesCreate(args []string) error {
	f := newClientFlags("instances create")
	var req api.CreateInstanceRequest
	var labels repeated
	f.fs.StringVar(&req.Zone, "zone", "", "zone (default: the cloud's first)")
	f.fs.StringVar(&req.InstanceType, "type", "", "instance type (default: the cloud's first)")
	f.fs.StringVar(&req.Cluster, "cluster", "", "cluster tag")
	f.fs.Var(&labels, "label", "label k=v (repeatable)")
	endpoint := f.fs.String("metadata-endpoint", string(api.MetadataEnabled), "serve the instance's metadata service: enabled or disabled")
	return f.call(args, 1, func(cx context.Context, c *client.Client, pos []string) error {
		req.Name = pos[0]
		req.MetadataEndpoint = api.MetadataEndpoint(*endpoint)
		for _, l := range labels {
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				return fmt.Errorf("--label %q is not k=v", l)
			}
			if req.Labels == nil {
				req.Labels = map[string]string{}
			}
			req.Labels[k] = v
		}
		in, err := c.CreateInstance(cx, req)
		if err != nil {
			return err
		}
		return f.print(in, instanceTable(*in))
	})
}

func instancesList(args []string) error {
	f := newClientFlags("instances list")
	var opts client.ListOptions
	var states repeated
	f.fs.StringVar(&opts.Cluster, "cluster", "", "only this cluster's instances")
	f.fs.Var(&states, "state", "only instances in this state (repeatable)")
	return f.call(args, 0, func(cx context.Context, c *client.Client, _ []string) error {
		for _, s := range states {
			opts.States = append(opts.States, api.InstanceState(s))
		}
		items, err := c.ListAllInstances(cx, opts)
		if err != nil {
			return err
		}
		return f.print(items, instanceTable(items...))
	})
}

func instanceAction(action string) func([]string) error {
	return func(args []string) error {
		f := newClientFlags("instances " + action)
		pos, err := f.parse(args, 1)
		if err != nil {
			return err
		}
		c, err := f.client()
		if err != nil {
			return err
		}
		cx, cancel := ctx()
		defer cancel()
		var in *api.Instance
		switch action {
		case "get":
			in, err = c.GetInstance(cx, pos[0])
		case "stop":
			in, err = c.StopInstance(cx, pos[0])
		case "start":
			in, err = c.StartInstance(cx, pos[0])
		case "terminate":
			in, err = c.TerminateInstance(cx, pos[0])
		}
		if err != nil {
			return f.explain(err)
		}
		return f.print(in, instanceTable(*in))
	}
}

func instancesMetadataEndpoint(args []string) error {
	f := newClientFlags("instances metadata-endpoint")
	return f.call(args, 2, func(cx context.Context, c *client.Client, pos []string) error {
		e := api.MetadataEndpoint(pos[1])
		if e != api.MetadataEnabled && e != api.MetadataDisabled {
			return fmt.Errorf("want %s or %s, not %q", api.MetadataEnabled, api.MetadataDisabled, pos[1])
		}
		in, err := c.SetMetadataEndpoint(cx, pos[0], e)
		if err != nil {
			return err
		}
		return f.print(in, instanceTable(*in))
	})
}

func lbTable(items ...api.LoadBalancer) func(io.Writer) {
	return func(w io.Writer) {
		fmt.Fprintln(w, "NAME\tVIP\tCLUSTER\tLISTENERS\tBACKENDS (HEALTHY/ALL)")
		for _, l := range items {
			var ls []string
			healthy, all := 0, 0
			for _, li := range l.Listeners {
				ls = append(ls, fmt.Sprintf("%d/%s", li.Port, li.Protocol))
				for _, b := range li.Backends {
					all++
					if b.Healthy != nil && *b.Healthy {
						healthy++
					}
				}
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d/%d\n", l.Name, l.VIP, l.Cluster, strings.Join(ls, ","), healthy, all)
		}
	}
}

func lbList(args []string) error {
	f := newClientFlags("lb list")
	var opts client.ListOptions
	f.fs.StringVar(&opts.Cluster, "cluster", "", "only this cluster's load balancers")
	return f.call(args, 0, func(cx context.Context, c *client.Client, _ []string) error {
		items, err := c.ListAllLoadBalancers(cx, opts)
		if err != nil {
			return err
		}
		return f.print(items, lbTable(items...))
	})
}

func lbGet(args []string) error {
	f := newClientFlags("lb get")
	return f.call(args, 1, func(cx context.Context, c *client.Client, pos []string) error {
		l, err := c.GetLoadBalancer(cx, pos[0])
		if err != nil {
			return err
		}
		return f.print(l, lbTable(*l))
	})
}

func lbEnsure(args []string) error {
	f := newClientFlags("lb ensure")
	file := f.fs.String("file", "", "LoadBalancerSpec as JSON (- for stdin)")
	return f.call(args, 1, func(cx context.Context, c *client.Client, pos []string) error {
		var (
			data []byte
			err  error
		)
		switch *file {
		case "":
			return errors.New("--file is required")
		case "-":
			data, err = io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
		default:
			data, err = os.ReadFile(*file)
		}
		if err != nil {
			return err
		}
		var spec api.LoadBalancerSpec
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&spec); err != nil {
			return fmt.Errorf("spec: %w", err)
		}
		l, err := c.EnsureLoadBalancer(cx, pos[0], spec)
		if err != nil {
			return err
		}
		return f.print(l, lbTable(*l))
	})
}

func lbDelete(args []string) error {
	f := newClientFlags("lb delete")
	return f.call(args, 1, func(cx context.Context, c *client.Client, pos []string) error {
		return c.DeleteLoadBalancer(cx, pos[0])
	})
}

func routeTable(items ...api.Route) func(io.Writer) {
	return func(w io.Writer) {
		fmt.Fprintln(w, "NAME\tCLUSTER\tDESTINATION\tINSTANCE")
		for _, r := range items {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", r.Name, r.Cluster, r.DestinationCIDR, r.InstanceID)
		}
	}
}

func routesList(args []string) error {
	f := newClientFlags("routes list")
	var opts client.ListOptions
	f.fs.StringVar(&opts.Cluster, "cluster", "", "only this cluster's routes")
	return f.call(args, 0, func(cx context.Context, c *client.Client, _ []string) error {
		items, err := c.ListAllRoutes(cx, opts)
		if err != nil {
			return err
		}
		return f.print(items, routeTable(items...))
	})
}

func routesCreate(args []string) error {
	f := newClientFlags("routes create")
	var r api.Route
	f.fs.StringVar(&r.DestinationCIDR, "cidr", "", "destination CIDR")
	f.fs.StringVar(&r.InstanceID, "instance", "", "target instance ID")
	f.fs.StringVar(&r.Cluster, "cluster", "", "cluster tag")
	return f.call(args, 1, func(cx context.Context, c *client.Client, pos []string) error {
		r.Name = pos[0]
		out, err := c.CreateRoute(cx, r)
		if err != nil {
			return err
		}
		return f.print(out, routeTable(*out))
	})
}

func routesDelete(args []string) error {
	f := newClientFlags("routes delete")
	return f.call(args, 1, func(cx context.Context, c *client.Client, pos []string) error {
		return c.DeleteRoute(cx, pos[0])
	})
}

func faultsGet(args []string) error {
	f := newClientFlags("faults get")
	return f.call(args, 0, func(cx context.Context, c *client.Client, _ []string) error {
		fl, err := c.Faults(cx)
		if err != nil {
			return err
		}
		return f.print(fl, nil)
	})
}

func faultsSet(args []string) error {
	f := newClientFlags("faults set")
	var fl api.Faults
	var ops repeated
	latency := f.fs.Duration("latency", 0, "latency added to every API call")
	f.fs.Float64Var(&fl.ErrorRate, "error-rate", 0, "share (0..1) of API calls that fail")
	f.fs.Var(&ops, "op", "per operation: NAME=RATE[:STATUS[:LATENCY]] (repeatable)")
	var stale repeated
	f.fs.Var(&stale, "stale-list", "instance ID that ListInstances leaves out while GetInstance serves it (repeatable)")
	return f.call(args, 0, func(cx context.Context, c *client.Client, _ []string) error {
		fl.Latency = api.Duration(*latency)
		fl.StaleList = stale
		for _, o := range ops {
			name, spec, ok := strings.Cut(o, "=")
			if !ok {
				return fmt.Errorf("--op %q is not NAME=RATE[:STATUS[:LATENCY]]", o)
			}
			parts := strings.Split(spec, ":")
			var of api.OperationFault
			var err error
			if of.ErrorRate, err = strconv.ParseFloat(parts[0], 64); err != nil {
				return fmt.Errorf("--op %q: rate: %w", o, err)
			}
			if len(parts) > 1 && parts[1] != "" {
				if of.Status, err = strconv.Atoi(parts[1]); err != nil {
					return fmt.Errorf("--op %q: status: %w", o, err)
				}
			}
			if len(parts) > 2 {
				d, err := time.ParseDuration(parts[2])
				if err != nil {
					return fmt.Errorf("--op %q: latency: %w", o, err)
				}
				of.Latency = api.Duration(d)
			}
			if fl.Operations == nil {
				fl.Operations = map[string]api.OperationFault{}
			}
			fl.Operations[name] = of
		}
		return c.SetFaults(cx, fl)
	})
}

func faultsClear(args []string) error {
	f := newClientFlags("faults clear")
	return f.call(args, 0, func(cx context.Context, c *client.Client, _ []string) error {
		return c.ClearFaults(cx)
	})
}

// rateLimit shows the API's rate limit, or sets it first when --limit is
// given.
func rateLimit(args []string) error {
	f := newClientFlags("ratelimit")
	var l api.RateLimit
	f.fs.Float64Var(&l.Limit, "limit", 0, "set the limit to this many API calls per second (0: unlimited)")
	f.fs.IntVar(&l.Burst, "burst", 0, "with --limit: calls allowed at once (default: the limit, at least 1)")
	return f.call(args, 0, func(cx context.Context, c *client.Client, _ []string) error {
		set := map[string]bool{}
		f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
		if set["burst"] && !set["limit"] {
			return errors.New("--burst needs --limit")
		}
		if set["limit"] {
			if math.IsNaN(l.Limit) || math.IsInf(l.Limit, 0) {
				return fmt.Errorf("--limit %g is not a finite number of calls per second", l.Limit)
			}
			if err := c.SetRateLimit(cx, l); err != nil {
				return err
			}
		}
		got, err := c.RateLimit(cx)
		if err != nil {
			return err
		}
		return f.print(got, func(w io.Writer) {
			fmt.Fprintln(w, "LIMIT\tBURST")
			if got.Limit == 0 {
				fmt.Fprintln(w, "unlimited\t-")
			} else {
				fmt.Fprintf(w, "%g/s\t%d\n", got.Limit, got.Burst)
			}
		})
	})
}

func stats(args []string) error {
	f := newClientFlags("stats")
	reset := f.fs.Bool("reset", false, "zero the counters after printing them")
	return f.call(args, 0, func(cx context.Context, c *client.Client, _ []string) error {
		s, err := c.Stats(cx)
		if err != nil {
			return err
		}
		if err := f.print(s, func(w io.Writer) {
			fmt.Fprintln(w, "OPERATION\tCALLS")
			for _, name := range sortedKeys(s.Calls) {
				fmt.Fprintf(w, "%s\t%d\n", name, s.Calls[name])
			}
			fmt.Fprintf(w, "(throttled)\t%d\n(faulted)\t%d\n", s.Throttled, s.Faulted)
		}); err != nil {
			return err
		}
		if *reset {
			return c.ResetStats(cx)
		}
		return nil
	})
}

func identityJWKS(args []string) error {
	f := newClientFlags("identity jwks")
	return f.call(args, 0, func(cx context.Context, c *client.Client, _ []string) error {
		data, err := c.JWKS(cx)
		if err != nil {
			return err
		}
		_, err = os.Stdout.Write(append(data, '\n'))
		return err
	})
}

func identityRotate(args []string) error {
	f := newClientFlags("identity rotate")
	return f.call(args, 0, func(cx context.Context, c *client.Client, _ []string) error {
		kid, err := c.RotateIdentityKey(cx)
		if err != nil {
			return err
		}
		fmt.Println(kid)
		return nil
	})
}

func metadataFlags(name string) (*flag.FlagSet, *string) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	return fs, fs.String("url", "", "the instance's metadata URL (its MetadataURL)")
}

func metadataInstance(args []string) error {
	fs, url := metadataFlags("metadata instance")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" {
		return errors.New("--url is required")
	}
	cx, cancel := ctx()
	defer cancel()
	id, err := client.NewMetadata(*url, nil).Instance(cx)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(id)
}

func metadataToken(args []string) error {
	fs, url := metadataFlags("metadata token")
	audience := fs.String("audience", "", "audience of the token (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *url == "" || *audience == "" {
		return errors.New("--url and --audience are required")
	}
	cx, cancel := ctx()
	defer cancel()
	tok, err := client.NewMetadata(*url, nil).IdentityToken(cx, *audience)
	if err != nil {
		return err
	}
	fmt.Println(tok)
	return nil
}

func sortedKeys(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
