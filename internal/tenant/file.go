package tenant

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v4"

	"stockpot/internal/bytesize"
	"stockpot/internal/kvtier"
)

// MaxFileBytes bounds a tenants file: tens of thousands of tenants fit, and a file meant as
// something else is refused before it is parsed.
const MaxFileBytes = 8 << 20

// KeyPrefix starts every stored key: the SHA-256 of the bearer key, in lowercase hex.
const KeyPrefix = "sha256:"

// FileError is a problem in a tenants file, at a line (1-based; 0 when it is the whole file).
type FileError struct {
	Line int
	Msg  string
}

func (e *FileError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("tenants file line %d: %s", e.Line, e.Msg)
	}
	return "tenants file: " + e.Msg
}

// ErrNoTenants is wrapped when a file parses but names no tenant.
var ErrNoTenants = errors.New("no tenants")

func errAt(n *yaml.Node, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &FileError{Line: line, Msg: fmt.Sprintf(format, args...)}
}

// Load reads and parses a tenants file (YAML or JSON). Errors name the path and the line.
func Load(path string) (*Set, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > MaxFileBytes {
		return nil, fmt.Errorf("%s: %d bytes, over the limit of %d", path, st.Size(), MaxFileBytes)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil && st.Size() > 0 {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// HashKey returns the stored form of a bearer key ("sha256:<hex>"), for writing tenants
// files.
func HashKey(key string) string {
	d := sha256.Sum256([]byte(key))
	return KeyPrefix + hex.EncodeToString(d[:])
}

// Parse reads a tenants file, YAML or JSON (JSON is YAML's flow style):
//
//	tenants:
//	  - name: acme
//	    namespace: acme        # optional; the name by default
//	    keys: ["sha256:<hex of the SHA-256 of the bearer key>"]
//	    quotas: {cache_bytes: 1GiB, requests_per_second: 50, burst: 100, concurrent: 8}
//	    public_reads: true
//
// cache_bytes is a size for every tier or a map of tier to size ({device: 256MiB, host:
// 1GiB, disk: 8GiB, remote: 8GiB}). Unknown fields, duplicate fields, names, namespaces or
// keys, malformed digests and negative quotas are errors naming their line (*FileError).
func Parse(data []byte) (*Set, error) {
	if len(data) > MaxFileBytes {
		return nil, &FileError{Msg: fmt.Sprintf("%d bytes, over the limit of %d", len(data), MaxFileBytes)}
	}

	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, yamlError(err)
	}
	if doc.Kind == 0 || len(doc.Content) == 0 {
		return nil, &FileError{Msg: fmt.Sprintf("empty; want a mapping with a \"tenants\" list (%v)", ErrNoTenants)}
	}
	root := doc.Content[0]
	if err := noAlias(root, 0); err != nil {
		return nil, err
	}
	var list *yaml.Node
	err := fields(root, "the top level", func(k string, kn, v *yaml.Node) error {
		if k != "tenants" {
			return errAt(kn, "unknown field %q at the top level (want tenants)", k)
		}
		if v.Kind != yaml.SequenceNode {
			return errAt(v, "tenants must be a list")
		}
		list = v
		return nil
	})
	if err != nil {
		return nil, err
	}
	if list == nil || len(list.Content) == 0 {
		return nil, errAt(root, "%v: want a non-empty \"tenants\" list", ErrNoTenants)
	}
	if n := len(list.Content); n >= 1<<16-1 {
		return nil, errAt(list, "%d tenants; at most %d", n, 1<<16-2)
	}
	s := &Set{byName: map[string]*Tenant{}}
	namespaces := map[string]int{}
	keyLine := map[[sha256.Size]byte]int{}
	for i, item := range list.Content {
		t, keyNodes, err := parseTenant(item)
		if err != nil {
			return nil, err
		}
		t.Index = i
		if prev, dup := s.byName[t.Name]; dup {
			return nil, errAt(item, "tenant %q is named twice (also tenant %d)", t.Name, prev.Index+1)
		}
		if line, dup := namespaces[t.Namespace]; dup {
			return nil, errAt(item, "namespace %q is already tenant on line %d's", t.Namespace, line)
		}
		namespaces[t.Namespace] = item.Line
		for j, d := range t.keys {
			if line, dup := keyLine[d]; dup {
				return nil, errAt(keyNodes[j], "this key is already listed on line %d (a key names one tenant)", line)
			}
			keyLine[d] = keyNodes[j].Line
			s.digests.AddDigest(d)
			s.owners = append(s.owners, i)
		}
		s.tenants = append(s.tenants, t)
		s.byName[t.Name] = t
	}
	return s, nil
}

// yamlError turns the YAML parser's error into a FileError with its line where it has one.
func yamlError(err error) error {
	var pe *yaml.ParserError
	if errors.As(err, &pe) {
		return &FileError{Line: pe.Line, Msg: "not YAML or JSON: " + pe.Message}
	}
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		ue := te.Errors[0]
		return &FileError{Line: ue.Line, Msg: ue.Err.Error()}
	}
	return &FileError{Msg: "not YAML or JSON: " + err.Error()}
}

// noAlias refuses anchors' aliases (no tenants file needs them, and expanding them is how a
// small file becomes a huge one) and nesting deeper than any tenants file has.
func noAlias(n *yaml.Node, depth int) error {
	if depth > 8 {
		return errAt(n, "nested too deep")
	}
	if n.Kind == yaml.AliasNode {
		return errAt(n, "aliases (*name) are not supported")
	}
	for _, c := range n.Content {
		if err := noAlias(c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// fields calls fn for each key of mapping n in order, refusing a non-mapping and duplicate keys.
func fields(n *yaml.Node, what string, fn func(key string, k, v *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return errAt(n, "%s must be a mapping", what)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return errAt(k, "a key in %s is not a string", what)
		}
		if seen[k.Value] {
			return errAt(k, "field %q given twice in %s", k.Value, what)
		}
		seen[k.Value] = true
		if err := fn(k.Value, k, v); err != nil {
			return err
		}
	}
	return nil
}

func parseTenant(n *yaml.Node) (*Tenant, []*yaml.Node, error) {
	t := &Tenant{}
	var keyNodes []*yaml.Node
	var nsNode *yaml.Node
	err := fields(n, "a tenant", func(k string, kn, v *yaml.Node) error {
		switch k {
		case "name":
			s, err := identifier(v, "name")
			t.Name = s
			return err
		case "namespace":
			s, err := identifier(v, "namespace")
			t.Namespace, nsNode = s, v
			return err
		case "keys":
			if v.Kind != yaml.SequenceNode {
				return errAt(v, "keys must be a list of %q digests", KeyPrefix+"<hex>")
			}
			for _, kn := range v.Content {
				d, err := digest(kn)
				if err != nil {
					return err
				}
				t.keys = append(t.keys, d)
				keyNodes = append(keyNodes, kn)
			}
			return nil
		case "quotas":
			return parseQuotas(v, &t.Quotas)
		case "public_reads":
			b, err := boolean(v, "public_reads")
			t.PublicReads = b
			return err
		default:
			return errAt(kn, "unknown field %q in a tenant (want name, namespace, keys, quotas, public_reads)", k)
		}
	})
	if err != nil {
		return nil, nil, err
	}
	if t.Name == "" {
		return nil, nil, errAt(n, "a tenant needs a name")
	}
	if len(t.keys) == 0 {
		return nil, nil, errAt(n, "tenant %q has no keys", t.Name)
	}
	if t.Namespace == "" {
		t.Namespace = t.Name
	}
	_ = nsNode
	return t, keyNodes, nil
}

func scalar(v *yaml.Node, field string) (string, error) {
	if v.Kind != yaml.ScalarNode {
		return "", errAt(v, "%s must be a single value", field)
	}
	return v.Value, nil
}

// identifier reads a name or namespace: 1 to 64 of [A-Za-z0-9._-], so it is safe in a metric
// label, a header and a log line.
func identifier(v *yaml.Node, field string) (string, error) {
	s, err := scalar(v, field)
	if err != nil {
		return "", err
	}
	if s == "" || len(s) > 64 {
		return "", errAt(v, "%s must be 1 to 64 characters, got %d", field, len(s))
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return "", errAt(v, "%s %q has %q; use letters, digits, '.', '_' and '-'", field, s, c)
		}
	}
	return s, nil
}

func digest(v *yaml.Node) ([sha256.Size]byte, error) {
	var d [sha256.Size]byte
	s, err := scalar(v, "a key")
	if err != nil {
		return d, err
	}
	h, ok := strings.CutPrefix(s, KeyPrefix)
	if !ok {
		return d, errAt(v, "a key must be stored hashed, as %q followed by the 64 hex digits of its SHA-256 (never the key itself)", KeyPrefix)
	}
	if len(h) != 2*sha256.Size {
		return d, errAt(v, "a key digest has %d hex digits, want %d", len(h), 2*sha256.Size)
	}
	if _, err := hex.Decode(d[:], []byte(strings.ToLower(h))); err != nil {
		return d, errAt(v, "a key digest is not hex: %v", err)
	}
	return d, nil
}

func boolean(v *yaml.Node, field string) (bool, error) {
	s, err := scalar(v, field)
	if err != nil {
		return false, err
	}
	switch s {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, errAt(v, "%s must be true or false, got %q", field, s)
}

func number(v *yaml.Node, field string) (float64, error) {
	s, err := scalar(v, field)
	if err != nil {
		return 0, err
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, errAt(v, "%s must be a number, got %q", field, s)
	}
	if f < 0 {
		return 0, errAt(v, "%s must be >= 0 (0: unlimited), got %v", field, f)
	}
	return f, nil
}

func integer(v *yaml.Node, field string) (int, error) {
	s, err := scalar(v, field)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 1<<30 {
		return 0, errAt(v, "%s must be a whole number from 0 (unlimited) to 2^30, got %q", field, s)
	}
	return n, nil
}

func size(v *yaml.Node, field string) (int64, error) {
	s, err := scalar(v, field)
	if err != nil {
		return 0, err
	}
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0, errAt(v, "%s: %v", field, err)
	}
	if n < 0 {
		return 0, errAt(v, "%s must be >= 0", field)
	}
	return n, nil
}

func parseQuotas(n *yaml.Node, q *Quotas) error {
	return fields(n, "quotas", func(k string, kn, v *yaml.Node) error {
		var err error
		switch k {
		case "requests_per_second":
			q.RequestsPerSecond, err = number(v, k)
		case "burst":
			q.Burst, err = integer(v, k)
		case "concurrent":
			q.Concurrent, err = integer(v, k)
		case "cache_bytes":
			if v.Kind == yaml.MappingNode {
				return fields(v, "cache_bytes", func(tn string, _, tv *yaml.Node) error {
					tier, err := kvtier.Parse(tn)
					if err != nil || tier == kvtier.Transfer {
						return errAt(tv, "cache_bytes: unknown tier %q (want device, host, disk, remote)", tn)
					}
					q.CacheBytes[tier], err = size(tv, "cache_bytes."+tn)
					return err
				})
			}
			var b int64
			if b, err = size(v, k); err == nil {
				for i := range q.CacheBytes {
					q.CacheBytes[i] = b
				}
			}
		default:
			return errAt(kn, "unknown quota %q (want requests_per_second, burst, concurrent, cache_bytes)", k)
		}
		return err
	})
}
