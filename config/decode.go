package config

import (
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// decoder turns an HCL file into the nested map of file values that koanf
// loads (map[block]map[label]map[key]value, keys as written in the file),
// recording where each key came from.
type decoder struct {
	file    string
	src     []byte
	ps      *problems
	origins map[string]origin   // key path → where its value came from
	labels  map[string][]string // "cluster", "link" → labels in file order
	// agentOnly: ParseAgent, which reads no cluster secret.
	agentOnly bool
}

func newDecoder(file string, src []byte, ps *problems) *decoder {
	return &decoder{file: file, src: src, ps: ps, origins: map[string]origin{}, labels: map[string][]string{}}
}

func (d *decoder) at(p hcl.Pos) origin {
	return origin{file: d.file, line: p.Line, col: p.Column, byte: p.Byte}
}

// where returns the origin of key, or of its nearest ancestor that has
// one (a missing key is reported at the block that lacks it), or the top
// of the file. exact says whether key itself was set.
func (d *decoder) where(key string) (o origin, exact bool) {
	for k := key; k != ""; k = parentKey(k) {
		if o, ok := d.origins[k]; ok {
			return o, k == key
		}
	}
	return d.at(hcl.InitialPos), false
}

// whereAny is where without exact.
func (d *decoder) whereAny(key string) origin {
	o, _ := d.where(key)
	return o
}

// text returns the source text of r.
func (d *decoder) text(r *hcl.Range) string {
	if r == nil || r.Start.Byte < 0 || r.End.Byte > len(d.src) || r.Start.Byte > r.End.Byte {
		return ""
	}
	return string(d.src[r.Start.Byte:r.End.Byte])
}

func joinKey(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// parse parses the file and reports syntax errors. It returns nil when
// the file cannot be decoded; a redefined key is reported but does not
// stop decoding.
func (d *decoder) parse() *hclsyntax.Body {
	f, diags := hclsyntax.ParseConfig(d.src, d.file, hcl.InitialPos)
	fatal := false
	var body *hclsyntax.Body
	if f != nil {
		body, _ = f.Body.(*hclsyntax.Body)
	}
	for _, diag := range diags {
		if diag.Severity != hcl.DiagError {
			continue
		}
		if diag.Summary == "Attribute redefined" && diag.Subject != nil && body != nil {
			d.redefined(body, diag.Subject)
			continue
		}
		fatal = true
		at := origin{}
		if diag.Subject != nil {
			at = d.at(diag.Subject.Start)
		}
		d.ps.add(at, "", "invalid HCL syntax: "+lowerFirst(strings.TrimSuffix(diag.Summary, ".")),
			lowerFirst(strings.TrimSuffix(diag.Detail, ".")))
	}
	if fatal || body == nil {
		return nil
	}
	return body
}

// redefined reports a key set twice in one block, which the HCL parser
// finds before any schema is applied.
func (d *decoder) redefined(body *hclsyntax.Body, subject *hcl.Range) {
	prefix := ""
	for inner := true; inner; {
		inner = false
		for _, blk := range body.Blocks {
			if blk.Range().ContainsPos(subject.Start) {
				prefix = joinKey(prefix, blk.Type)
				if len(blk.Labels) > 0 {
					prefix = joinKey(prefix, blk.Labels[0])
				}
				body, inner = blk.Body, true
				break
			}
		}
	}
	name := d.text(subject)
	hint := "keep one"
	if first, ok := body.Attributes[name]; ok {
		hint = fmt.Sprintf("it is first set at %s; keep one", d.at(first.NameRange.Start))
	}
	d.ps.add(d.at(subject.Start), joinKey(prefix, name), "set twice", hint)
	d.ps.fail(joinKey(prefix, name))
}

// body decodes one block body into out. prefix is the block's key path
// ("" for the file, "cluster.src", "cluster.src.tls", ...).
func (d *decoder) body(body hcl.Body, spec *blockSpec, prefix string, out map[string]any) {
	content, diags := body.Content(spec.hcl())
	for _, diag := range diags {
		d.schemaDiag(diag, spec, prefix)
	}
	for name, attr := range content.Attributes {
		ks, _ := spec.key(name)
		key := joinKey(prefix, name)
		d.origins[key] = d.at(attr.Expr.Range().Start) // problems point at the value
		if ks.refuse != "" {
			d.ps.add(d.at(attr.NameRange.Start), key, "not allowed", ks.refuse)
			d.ps.fail(key)
			continue
		}
		if v, ok := d.value(attr.Expr, ks, key); ok {
			out[name] = v
		} else {
			d.ps.fail(key)
		}
	}
	first := map[string]hcl.Range{}
	for _, blk := range content.Blocks {
		sub, _ := spec.block(blk.Type)
		key := joinKey(prefix, blk.Type)
		what := blk.Type + " block"
		if sub.labelled {
			label := blk.Labels[0]
			if !labelRE.MatchString(label) {
				d.ps.add(d.at(blk.LabelRanges[0].Start), key, fmt.Sprintf("invalid name %q", label), labelHint)
				continue
			}
			key = joinKey(key, label)
			what = fmt.Sprintf("%s %q", what, label)
		}
		if r, dup := first[key]; dup {
			d.ps.add(d.at(blk.DefRange.Start), key, "duplicate "+what,
				fmt.Sprintf("the first is at %s; %s", d.at(r.Start), dupHint(sub)))
			continue
		}
		first[key] = blk.DefRange
		d.origins[key] = d.at(blk.DefRange.Start)
		inner := map[string]any{}
		if sub.labelled {
			byLabel, _ := out[blk.Type].(map[string]any)
			if byLabel == nil {
				byLabel = map[string]any{}
				out[blk.Type] = byLabel
			}
			byLabel[blk.Labels[0]] = inner
			d.labels[blk.Type] = append(d.labels[blk.Type], blk.Labels[0])
		} else {
			out[blk.Type] = inner
		}
		d.body(blk.Body, sub, key, inner)
	}
}

func dupHint(sub *blockSpec) string {
	if sub.labelled {
		return fmt.Sprintf("each %s needs its own name", sub.typ)
	}
	return "merge them into one"
}

// schemaDiag turns a diagnostic of hcl.Body.Content into a Problem.
func (d *decoder) schemaDiag(diag *hcl.Diagnostic, spec *blockSpec, prefix string) {
	if diag.Severity != hcl.DiagError {
		return
	}
	at := origin{}
	if diag.Subject != nil {
		at = d.at(diag.Subject.Start)
	}
	switch s := diag.Summary; {
	case s == "Unsupported argument":
		name := d.text(diag.Subject)
		d.ps.add(at, joinKey(prefix, name), "unknown key", spec.unknownHint(name, false))
	case s == "Unsupported block type":
		name := d.text(diag.Subject)
		d.ps.add(at, joinKey(prefix, name), "unknown block", spec.unknownHint(name, true))
	case strings.HasPrefix(s, "Extraneous label for "):
		typ := strings.TrimPrefix(s, "Extraneous label for ")
		if sub, ok := spec.block(typ); ok && !sub.labelled {
			d.ps.add(at, joinKey(prefix, typ), "unexpected name", fmt.Sprintf("write %s { ... } without a name", typ))
		} else {
			d.ps.add(at, joinKey(prefix, typ), "too many names", fmt.Sprintf(`write %s "name" { ... }`, typ))
		}
	case strings.HasPrefix(s, "Missing name for "):
		typ := strings.TrimPrefix(s, "Missing name for ")
		d.ps.add(at, joinKey(prefix, typ), "missing name", fmt.Sprintf(`write %s "name" { ... }`, typ))
	default:
		d.ps.add(at, prefix, lowerFirst(strings.TrimSuffix(s, ".")), lowerFirst(strings.TrimSuffix(diag.Detail, ".")))
	}
}

// value evaluates an attribute and converts it to the Go type of its
// kind: string, bool, int64, time.Duration, int64 (size) or []string.
func (d *decoder) value(expr hcl.Expression, ks keySpec, key string) (any, bool) {
	at := d.at(expr.Range().Start)
	switch ks.kind {
	case kindList:
		return d.list(expr, key)
	case kindMap:
		return d.stringMap(expr, key)
	}
	v, diags := expr.Value(nil)
	if diags.HasErrors() {
		d.notLiteral(at, key, diags)
		return nil, false
	}
	if v.IsNull() {
		d.ps.add(at, key, "null is not a value", "remove the line to use the default")
		return nil, false
	}
	ty := v.Type()
	switch ks.kind {
	case kindString:
		if ty == cty.String {
			return v.AsString(), true
		}
		d.ps.add(at, key, "must be a string, got "+typeName(ty), "put the value in double quotes")
	case kindBool:
		if ty == cty.Bool {
			return v.True(), true
		}
		d.ps.add(at, key, "must be true or false, got "+typeName(ty), "write true or false without quotes")
	case kindInt:
		if ty == cty.Number {
			if n, ok := wholeNumber(v.AsBigFloat()); ok {
				return n, true
			}
			d.ps.add(at, key, "must be a whole number, got "+v.AsBigFloat().Text('g', -1), "write an integer")
			return nil, false
		}
		d.ps.add(at, key, "must be a whole number, got "+typeName(ty), "write the number without quotes")
	case kindDuration:
		if ty == cty.String {
			dur, msg, hint := parseDuration(v.AsString())
			if msg == "" {
				return dur, true
			}
			d.ps.add(at, key, msg, hint)
			return nil, false
		}
		d.ps.add(at, key, "must be a duration string, got "+typeName(ty), durationHint)
	case kindSize:
		switch ty {
		case cty.Number:
			if n, ok := wholeNumber(v.AsBigFloat()); ok {
				return n, true
			}
			d.ps.add(at, key, "invalid size "+v.AsBigFloat().Text('g', -1), sizeHint)
			return nil, false
		case cty.String:
			n, msg, hint := parseSize(v.AsString())
			if msg == "" {
				return n, true
			}
			d.ps.add(at, key, msg, hint)
			return nil, false
		}
		d.ps.add(at, key, "must be a byte count, got "+typeName(ty), sizeHint)
	}
	return nil, false
}

// list decodes a list of strings, element by element so that each
// element has its own position (key[i]).
func (d *decoder) list(expr hcl.Expression, key string) (any, bool) {
	at := d.at(expr.Range().Start)
	elems, diags := hcl.ExprList(expr)
	if diags.HasErrors() {
		v, vdiags := expr.Value(nil)
		if vdiags.HasErrors() {
			d.notLiteral(at, key, vdiags)
		} else {
			d.ps.add(at, key, "must be a list of strings, got "+typeName(v.Type()), `write a list such as ["a", "b"]`)
		}
		return nil, false
	}
	out := make([]string, 0, len(elems))
	ok := true
	for i, e := range elems {
		ekey := fmt.Sprintf("%s[%d]", key, i)
		eat := d.at(e.Range().Start)
		d.origins[ekey] = eat
		v, diags := e.Value(nil)
		switch {
		case diags.HasErrors():
			d.notLiteral(eat, ekey, diags)
			ok = false
		case v.IsNull() || v.Type() != cty.String:
			d.ps.add(eat, ekey, "must be a string, got "+typeName(v.Type()), "put the value in double quotes")
			ok = false
		default:
			out = append(out, v.AsString())
		}
	}
	return out, ok
}

const mapHint = `write a map of strings such as { key = "value" }`

// stringMap decodes a map of strings, entry by entry so that each entry
// has its own position (key.name).
func (d *decoder) stringMap(expr hcl.Expression, key string) (any, bool) {
	at := d.at(expr.Range().Start)
	pairs, diags := hcl.ExprMap(expr)
	if diags.HasErrors() {
		v, vdiags := expr.Value(nil)
		if vdiags.HasErrors() {
			d.notLiteral(at, key, vdiags)
		} else {
			d.ps.add(at, key, "must be a map of strings, got "+typeName(v.Type()), mapHint)
		}
		return nil, false
	}
	out := make(map[string]string, len(pairs))
	ok := true
	for _, p := range pairs {
		kat := d.at(p.Key.Range().Start)
		k, diags := p.Key.Value(nil)
		if diags.HasErrors() || k.IsNull() || k.Type() != cty.String {
			d.ps.add(kat, key, "map keys must be names or strings", mapHint)
			ok = false
			continue
		}
		ekey := joinKey(key, k.AsString())
		if _, dup := out[k.AsString()]; dup {
			d.ps.add(kat, ekey, "set twice", "keep one")
			ok = false
			continue
		}
		vat := d.at(p.Value.Range().Start)
		d.origins[ekey] = vat
		v, diags := p.Value.Value(nil)
		switch {
		case diags.HasErrors():
			d.notLiteral(vat, ekey, diags)
			ok = false
		case v.IsNull() || v.Type() != cty.String:
			d.ps.add(vat, ekey, "must be a string, got "+typeName(v.Type()), "put the value in double quotes")
			ok = false
		default:
			out[k.AsString()] = v.AsString()
		}
	}
	return out, ok
}

func (d *decoder) notLiteral(at origin, key string, diags hcl.Diagnostics) {
	summary := "not a literal value"
	for _, diag := range diags {
		if diag.Severity == hcl.DiagError {
			summary = lowerFirst(diag.Summary)
			break
		}
	}
	d.ps.add(at, key, summary,
		"write a literal value; the configuration has no variables or functions, use MIRRORD_ environment overrides instead")
}

func typeName(ty cty.Type) string {
	switch {
	case ty == cty.DynamicPseudoType:
		return "null"
	case ty.IsTupleType() || ty.IsListType() || ty.IsSetType():
		return "list"
	case ty.IsObjectType() || ty.IsMapType():
		return "object"
	}
	return ty.FriendlyName()
}

func wholeNumber(f *big.Float) (int64, bool) {
	if !f.IsInt() {
		return 0, false
	}
	n, acc := f.Int64()
	return n, acc == big.Exact
}

const durationHint = `write a number with a unit: ms, s, m or h, e.g. "5s" or "1h30m"`

func parseDuration(s string) (time.Duration, string, string) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Sprintf("invalid duration %q", s), durationHint
	}
	return d, "", ""
}

const sizeHint = `write a number of bytes, or a number with a unit: KiB, MiB, GiB, KB, MB or GB, e.g. "64MiB"`

var sizeUnits = map[string]int64{
	"": 1, "B": 1,
	"KB": 1000, "MB": 1000 * 1000, "GB": 1000 * 1000 * 1000,
	"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30,
}

// parseSize parses "1048576", "64MiB", "1.5GiB", "10 MB".
func parseSize(s string) (int64, string, string) {
	t := strings.TrimSpace(s)
	i := strings.IndexFunc(t, func(r rune) bool { return r != '.' && !unicode.IsDigit(r) })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], strings.TrimSpace(t[i:])
	}
	mult, okUnit := sizeUnits[unit]
	f, err := strconv.ParseFloat(num, 64)
	if !okUnit || err != nil || num == "" {
		return 0, fmt.Sprintf("invalid size %q", s), sizeHint
	}
	v := f * float64(mult)
	if v != float64(int64(v)) || v > 1<<62 {
		return 0, fmt.Sprintf("invalid size %q", s), "the size must be a whole number of bytes below 4 EiB"
	}
	return int64(v), "", ""
}

func lowerFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToLower(s[:1]) + s[1:]
}
