package vsphere

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/vmware/govmomi/vapi/rest"
	"github.com/vmware/govmomi/vapi/tags"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// maxTagObjects bounds the objects of one list-attached-tags-on-objects
// request; more are asked in several.
const maxTagObjects = 1000

// tagCache reads the tags attached to many objects at once (the vAPI's
// list-attached-tags-on-objects: one request however many objects) and
// keeps what a tag id and a category name stand for, which change rarely,
// for ttl: a listing costs one request once the tags it meets are known.
type tagCache struct {
	ttl time.Duration
	now func() time.Time

	mu         sync.Mutex
	read       time.Time
	categoryID map[string]string   // category name -> id
	tag        map[string]tags.Tag // tag id -> tag
}

// tagOf is a tag attached to an object: its name and its category's id.
type tagOf struct{ name, categoryID string }

func newTagCache(ttl time.Duration) *tagCache {
	return &tagCache{ttl: ttl, now: time.Now}
}

// categories resolves category names to ids; a name vCenter has no category
// of is an error (a configuration that names a category nobody made).
func (t *tagCache) categories(ctx context.Context, rc *rest.Client, names ...string) (map[string]string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expire()
	out := map[string]string{}
	for _, n := range names {
		if n == "" {
			continue
		}
		if id, ok := t.categoryID[n]; ok {
			out[n] = id
			continue
		}
		// One list, then the categories one by one (the vAPI's list
		// gives ids only); once per ttl.
		cats, err := tags.NewManager(rc).GetCategories(ctx)
		if err != nil {
			return nil, &restError{fmt.Errorf("vsphere tag categories: %w", err)}
		}
		for _, c := range cats {
			t.categoryID[c.Name] = c.ID
		}
		id, ok := t.categoryID[n]
		if !ok {
			return nil, fmt.Errorf("vsphere: vCenter has no tag category %q", n)
		}
		out[n] = id
	}
	return out, nil
}

// attached reads the tags attached to objs: one request per
// maxTagObjects objects, and a request per tag not seen within ttl.
func (t *tagCache) attached(ctx context.Context, rc *rest.Client, objs []types.ManagedObjectReference) (map[types.ManagedObjectReference][]tagOf, error) {
	m := tags.NewManager(rc)
	out := make(map[types.ManagedObjectReference][]tagOf, len(objs))
	for start := 0; start < len(objs); start += maxTagObjects {
		end := min(start+maxTagObjects, len(objs))
		refs := make([]mo.Reference, 0, end-start)
		for _, o := range objs[start:end] {
			refs = append(refs, o)
		}
		res, err := m.ListAttachedTagsOnObjects(ctx, refs)
		if err != nil {
			return nil, &restError{fmt.Errorf("vsphere tags attached to %d objects: %w", len(refs), err)}
		}
		for _, a := range res {
			if a.ObjectID == nil {
				continue
			}
			ref := a.ObjectID.Reference()
			for _, id := range a.TagIDs {
				tag, err := t.get(ctx, m, id)
				if err != nil {
					return nil, err
				}
				out[ref] = append(out[ref], tagOf{name: tag.Name, categoryID: tag.CategoryID})
			}
		}
	}
	return out, nil
}

// get is the tag of id, from the cache or vCenter.
func (t *tagCache) get(ctx context.Context, m *tags.Manager, id string) (tags.Tag, error) {
	t.mu.Lock()
	t.expire()
	tag, ok := t.tag[id]
	t.mu.Unlock()
	if ok {
		return tag, nil
	}
	got, err := m.GetTag(ctx, id)
	if err != nil {
		return tags.Tag{}, &restError{fmt.Errorf("vsphere tag %s: %w", id, err)}
	}
	t.mu.Lock()
	t.tag[id] = *got
	t.mu.Unlock()
	return *got, nil
}

// expire forgets everything older than ttl. t.mu is held.
func (t *tagCache) expire() {
	if now := t.now(); t.tag == nil || now.Sub(t.read) > t.ttl {
		t.read, t.categoryID, t.tag = now, map[string]string{}, map[string]tags.Tag{}
	}
}
