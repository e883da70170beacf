package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

type object struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Data map[string]string `json:"data"`
	Spec struct {
		Template struct {
			Spec struct {
				Containers []struct {
					Image string `json:"image"`
					Env   []struct {
						Name      string `json:"name"`
						ValueFrom *struct {
							ConfigMapKeyRef *struct {
								Name string `json:"name"`
							} `json:"configMapKeyRef"`
						} `json:"valueFrom"`
					} `json:"env"`
				} `json:"containers"`
				Volumes []struct {
					Name   string `json:"name"`
					Secret *struct {
						SecretName string `json:"secretName"`
					} `json:"secret"`
				} `json:"volumes"`
			} `json:"spec"`
		} `json:"template"`
	} `json:"spec"`
}

var strictDecoder = serializer.NewCodecFactory(scheme.Scheme, serializer.EnableStrict).UniversalDeserializer()

// parse splits a rendered file into its objects.
func parse(t *testing.T, b []byte) []object {
	t.Helper()
	var objs []object
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var o object
		if err := yaml.UnmarshalStrict([]byte(doc), &map[string]any{}); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		// A Kubernetes object of a kind client-go knows, every field known.
		if _, _, err := strictDecoder.Decode([]byte(doc), nil, nil); err != nil {
			t.Errorf("%s %s: %v", o.Kind, o.Metadata.Name, err)
		}
		if o.Kind == "" || o.Metadata.Name == "" {
			t.Fatalf("no kind or name:\n%s", doc)
		}
		objs = append(objs, o)
	}
	return objs
}

// TestRenderAll renders every overlay as make release does and checks each
// file: it parses, names the release's images, holds no Secret, names the
// cloud's Secret and ConfigMap without kustomize's hash, and leaves no
// placeholder to apply; rendering twice gives the same bytes.
func TestRenderAll(t *testing.T) {
	const (
		registry = "registry.example:5000/team"
		tag      = "v1.2.3-4-g0123456789ab"
	)
	out := t.TempDir()
	files, err := renderAll("../../deploy/overlays", out, registry, tag, tag)
	if err != nil {
		t.Fatal(err)
	}
	overlays, err := os.ReadDir("../../deploy/overlays")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(overlays) {
		t.Errorf("%d files for %d overlays", len(files), len(overlays))
	}
	again, err := renderAll("../../deploy/overlays", t.TempDir(), registry, tag, tag)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		overlay := overlays[i].Name()
		if want := filepath.Join(out, "mooring_"+tag+"_"+overlay+".yaml"); f != want {
			t.Errorf("file %s, want %s", f, want)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if b2, err := os.ReadFile(again[i]); err != nil || !bytes.Equal(b, b2) {
			t.Errorf("%s: rendering twice gave different bytes (%v)", overlay, err)
		}
		if bytes.Contains(b, []byte("REPLACE")) {
			t.Errorf("%s: a placeholder is left", overlay)
		}
		objs := parse(t, b)
		var deployments, configMaps, spentTickets int
		for _, o := range objs {
			switch o.Kind {
			case "Secret":
				t.Errorf("%s: Secret %s", overlay, o.Metadata.Name)
			case "ConfigMap":
				if strings.HasPrefix(o.Metadata.Name, "mooring-spent-tickets-") {
					// components/join-tickets' record of spent
					// tickets, shipped empty.
					spentTickets++
					if len(o.Data) > 0 {
						t.Errorf("%s: ConfigMap %s %v", overlay, o.Metadata.Name, o.Data)
					}
					continue
				}
				configMaps++
				if o.Metadata.Name != "mooring-cloud" || o.Data["provider"] != overlay {
					t.Errorf("%s: ConfigMap %s %v", overlay, o.Metadata.Name, o.Data)
				}
			case "Deployment":
				deployments++
				spec := o.Spec.Template.Spec
				if len(spec.Containers) != 1 {
					t.Fatalf("%s: %d containers", overlay, len(spec.Containers))
				}
				c := spec.Containers[0]
				if want := registry + "/" + o.Metadata.Name + ":" + tag; c.Image != want {
					t.Errorf("%s: Deployment %s runs %s, want %s", overlay, o.Metadata.Name, c.Image, want)
				}
				var provider string
				for _, e := range c.Env {
					if e.Name == "CLOUD_PROVIDER" && e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
						provider = e.ValueFrom.ConfigMapKeyRef.Name
					}
				}
				var secrets []string
				for _, v := range spec.Volumes {
					if v.Secret != nil {
						secrets = append(secrets, v.Secret.SecretName)
					}
				}
				if provider != "mooring-cloud" || !slices.Contains(secrets, "mooring-cloud-config") {
					t.Errorf("%s: Deployment %s takes the provider from %q and mounts %v", overlay, o.Metadata.Name, provider, secrets)
				}
			}
		}
		if deployments != 1 {
			t.Errorf("%s: %d Deployments", overlay, deployments)
		}
		// approver-only leaves the backend to the user; the others name it.
		if want := map[bool]int{true: 0, false: 1}[overlay == "approver-only"]; configMaps != want {
			t.Errorf("%s: %d ConfigMaps, want %d", overlay, configMaps, want)
		}
		// Overlays that accept join tickets ship the 16 spent-ticket
		// ConfigMaps (the approver may not create them).
		if want := map[bool]int{true: 16, false: 0}[bytes.Contains(b, []byte("mooring-join-ticket-keys"))]; spentTickets != want {
			t.Errorf("%s: %d spent-ticket ConfigMaps, want %d", overlay, spentTickets, want)
		}
		if !bytes.HasPrefix(b, []byte("# mooring "+tag+": deploy/overlays/"+overlay+" ")) {
			t.Errorf("%s: header %q", overlay, strings.SplitN(string(b), "\n", 2)[0])
		}
	}
}
