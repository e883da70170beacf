// Command mooring-localcloud runs the local cloud (serve) and talks to it
// (every other command). See docs/localcloud.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/mooring-dev/mooring/internal/version"
)

// command is one subcommand: words such as "instances create", its help
// line and its function (which receives the remaining arguments).
type command struct {
	words string
	usage string
	run   func(args []string) error
}

func commands() []command {
	return []command{
		{"serve", "run the local cloud daemon", serve},
		{"instances create", "NAME [--zone Z] [--type T] [--cluster C] [--label k=v]... [--metadata-endpoint enabled|disabled]", instancesCreate},
		{"instances list", "[--cluster C] [--state S]...", instancesList},
		{"instances get", "ID", instanceAction("get")},
		{"instances stop", "ID", instanceAction("stop")},
		{"instances start", "ID", instanceAction("start")},
		{"instances terminate", "ID", instanceAction("terminate")},
		{"instances metadata-endpoint", "ID enabled|disabled", instancesMetadataEndpoint},
		{"lb list", "[--cluster C]", lbList},
		{"lb get", "NAME", lbGet},
		{"lb ensure", "NAME --file SPEC.json (a LoadBalancerSpec; - reads stdin)", lbEnsure},
		{"lb delete", "NAME", lbDelete},
		{"routes list", "[--cluster C]", routesList},
		{"routes create", "NAME --cidr CIDR --instance ID [--cluster C]", routesCreate},
		{"routes delete", "NAME", routesDelete},
		{"faults get", "", faultsGet},
		{"faults set", "[--latency D] [--error-rate R] [--op NAME=RATE[:STATUS[:LATENCY]]]... [--stale-list ID]...", faultsSet},
		{"faults clear", "", faultsClear},
		{"ratelimit", "[--limit CALLS_PER_S [--burst N]] (no flags: show it)", rateLimit},
		{"stats", "[--reset]", stats},
		{"identity jwks", "", identityJWKS},
		{"identity rotate", "", identityRotate},
		{"metadata instance", "--url METADATA_URL", metadataInstance},
		{"metadata token", "--url METADATA_URL --audience A", metadataToken},
	}
}

// usage writes the help to w: of every command, or, with a group (the
// first word of commands such as "faults get"), of that group's.
func usage(w io.Writer, group string) {
	if group == "" {
		fmt.Fprintln(w, "usage: mooring-localcloud COMMAND [flags]")
	} else {
		fmt.Fprintf(w, "usage: mooring-localcloud %s COMMAND [flags]\n", group)
	}
	fmt.Fprintln(w, "\nClient commands find the API in $MOORING_LOCALCLOUD_URL (or --url) and the token in")
	fmt.Fprintln(w, "$MOORING_LOCALCLOUD_TOKEN (or --token-file); add -o json for JSON output.")
	fmt.Fprintln(w, "COMMAND --help lists a command's flags; --version prints the version.\n\ncommands:")
	cmds := commands()
	sort.SliceStable(cmds, func(i, j int) bool { return cmds[i].words < cmds[j].words })
	for _, c := range cmds {
		if group == "" || groupOf(c.words) == group {
			fmt.Fprintf(w, "  %-28s %s\n", c.words, c.usage)
		}
	}
}

// groupOf is the group of a command of several words ("faults" of "faults
// get"); "" for a command of one word.
func groupOf(words string) string {
	g, _, ok := strings.Cut(words, " ")
	if !ok {
		return ""
	}
	return g
}

// isGroup reports whether word names a group of commands.
func isGroup(word string) bool {
	for _, c := range commands() {
		if groupOf(c.words) == word {
			return true
		}
	}
	return false
}

// isHelp reports whether arg asks for help.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

func main() {
	args := os.Args[1:]
	if len(args) > 0 && isHelp(args[0]) {
		// Asked for: on stdout, and a success.
		usage(os.Stdout, "")
		return
	}
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version") {
		fmt.Println("mooring-localcloud " + version.Get().String())
		return
	}
	if len(args) == 0 {
		usage(os.Stderr, "")
		os.Exit(2)
	}
	// A group's help ("faults --help") lists its commands; the group alone
	// ("faults") is a usage error that lists them too.
	if isGroup(args[0]) && (len(args) == 1 || isHelp(args[1])) {
		if len(args) > 1 {
			usage(os.Stdout, args[0])
			return
		}
		fmt.Fprintf(os.Stderr, "mooring-localcloud %s: a command is required\n\n", args[0])
		usage(os.Stderr, args[0])
		os.Exit(2)
	}
	for _, c := range commands() {
		words := strings.Fields(c.words)
		if len(args) < len(words) || strings.Join(args[:len(words)], " ") != c.words {
			continue
		}
		if err := c.run(args[len(words):]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return // COMMAND --help: the flag package printed the flags
			}
			fmt.Fprintf(os.Stderr, "mooring-localcloud %s: %v\n", c.words, err)
			os.Exit(1)
		}
		return
	}
	fmt.Fprintf(os.Stderr, "mooring-localcloud: unknown command %q\n\n", strings.Join(args, " "))
	group := ""
	if isGroup(args[0]) {
		group = args[0]
	}
	usage(os.Stderr, group)
	os.Exit(2)
}
