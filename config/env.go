package config

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
)

// EnvPrefix starts the name of every environment override.
const EnvPrefix = "MIRRORD_"

// envLevelSep separates levels in an override's name.
const envLevelSep = "__"

// override is one accepted environment override.
type override struct {
	path  string // koanf key path, e.g. link.eu.checkpoint_interval
	value any    // typed like the file value of the same key
}

// environment reads the MIRRORD_ overrides from environ. It reports bad
// names and values and returns the accepted overrides by variable name.
// Variables named by some password_env, token_env or client_secret_env are
// secrets, not overrides, and are left alone. values are the decoded file values (for password_env).
func (d *decoder) environment(environ []string, values map[string]any) map[string]override {
	type entry struct{ name, value string }
	var entries []entry
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if ok && strings.HasPrefix(name, EnvPrefix) {
			entries = append(entries, entry{name, value})
		}
	}
	slices.SortStableFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })

	// Names that password_env, token_env or client_secret_env give, in
	// the file or in an override: secrets, not overrides.
	secrets := map[string]bool{}
	envRefValues(rootSpec, values, secrets)
	refKeys := envRefKeys()
	for _, e := range entries {
		upper := strings.ToUpper(e.name)
		for _, k := range refKeys {
			if strings.HasSuffix(upper, envLevelSep+strings.ToUpper(k)) {
				secrets[e.value] = true
			}
		}
	}

	accepted := map[string]override{}
	byPath := map[string]string{} // key path → variable that set it
	for i, e := range entries {
		if secrets[e.name] || (i+1 < len(entries) && entries[i+1].name == e.name) {
			continue // a secret, or a duplicate entry of which the last wins
		}
		at := origin{env: e.name}
		key, ks, ok := d.envKey(e.name)
		if !ok {
			continue
		}
		if prev, dup := byPath[key]; dup {
			d.ps.add(at, key, "also set by "+prev, "unset one of them")
			d.ps.fail(key)
			continue
		}
		byPath[key] = e.name
		d.origins[key] = at
		v, msg, hint := envValue(ks, e.value, e.name, key, d)
		if msg != "" {
			d.ps.add(at, key, msg, hint)
			d.ps.fail(key)
			continue
		}
		// A sub-block set only from the environment exists from now on
		// (tls.enabled defaults to whether the tls block exists).
		for p := parentKey(key); p != ""; p = parentKey(p) {
			if _, ok := d.origins[p]; !ok {
				d.origins[p] = at
			}
		}
		accepted[e.name] = override{path: key, value: v}
	}
	return accepted
}

// envKey maps a variable name to a key path and reports a name that is
// not an override of a known key of a block in the file. ok is false for a
// problem and for a MIRRORD_ variable that is not an override at all.
func (d *decoder) envKey(name string) (key string, ks keySpec, ok bool) {
	at := origin{env: name}
	rest := strings.TrimPrefix(name, EnvPrefix)
	levels := strings.Split(rest, envLevelSep)
	typ := strings.ToLower(levels[0])
	spec, known := rootSpec.block(typ)
	if !known {
		low := strings.ToLower(rest)
		for _, s := range rootSpec.blocks {
			if strings.HasPrefix(low, s.typ+"_") {
				d.ps.add(at, "", "not a valid override name",
					fmt.Sprintf("separate levels with a double underscore, e.g. %s%s%s<KEY>", EnvPrefix, strings.ToUpper(s.typ), envLevelSep))
				return "", keySpec{}, false
			}
		}
		return "", keySpec{}, false // not an override: left to the command line
	}
	key = typ
	rest2 := levels[1:]
	if spec.labelled {
		if len(rest2) == 0 || rest2[0] == "" {
			d.ps.add(at, "", "missing "+typ+" name",
				fmt.Sprintf("write %s%s%s<name>%s<KEY>", EnvPrefix, strings.ToUpper(typ), envLevelSep, envLevelSep))
			return "", keySpec{}, false
		}
		label := rest2[0]
		key = joinKey(key, label)
		if !slices.Contains(d.labels[typ], label) {
			hint := fmt.Sprintf("overrides change blocks of the file; define %s %q { ... } there", typ, label)
			if len(d.labels[typ]) > 0 {
				hint += "; names are case-sensitive, the file has " + strings.Join(d.labels[typ], ", ")
			}
			d.ps.add(at, key, fmt.Sprintf("no %s %q in the file", typ, label), hint)
			return "", keySpec{}, false
		}
		rest2 = rest2[1:]
	}
	if len(rest2) == 0 {
		d.ps.add(at, key, "names a block, not a key", fmt.Sprintf("append %s<KEY>", envLevelSep))
		return "", keySpec{}, false
	}
	for i, level := range rest2 {
		lname := strings.ToLower(level)
		if i == len(rest2)-1 {
			k, found := spec.key(lname)
			if !found {
				d.ps.add(at, joinKey(key, lname), "unknown key", spec.unknownHint(lname, false))
				return "", keySpec{}, false
			}
			if k.refuse != "" {
				d.ps.add(at, joinKey(key, lname), "not allowed", k.refuse)
				return "", keySpec{}, false
			}
			return joinKey(key, lname), k, true
		}
		sub, found := spec.block(lname)
		if !found || sub.labelled {
			d.ps.add(at, joinKey(key, lname), "unknown block", spec.unknownHint(lname, true))
			return "", keySpec{}, false
		}
		spec, key = sub, joinKey(key, lname)
	}
	panic("unreachable")
}

// envValue converts an override's text to the type of its key. A list is
// either comma-separated (a, b) or written like in the file (["a", "b"]);
// use the second form for patterns that contain commas.
func envValue(ks keySpec, s, name, key string, d *decoder) (any, string, string) {
	switch ks.kind {
	case kindString:
		return s, "", ""
	case kindBool:
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "true":
			return true, "", ""
		case "false":
			return false, "", ""
		}
		return nil, fmt.Sprintf("must be true or false, got %q", s), "set the variable to true or false"
	case kindInt:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return nil, fmt.Sprintf("must be a whole number, got %q", s), "set the variable to an integer"
		}
		return n, "", ""
	case kindDuration:
		return parseDuration(s)
	case kindSize:
		return parseSize(s)
	case kindList:
		t := strings.TrimSpace(s)
		if !strings.HasPrefix(t, "[") {
			var out []string
			for part := range strings.SplitSeq(t, ",") {
				if part = strings.TrimSpace(part); part != "" {
					out = append(out, part)
				}
			}
			for i := range out {
				d.origins[fmt.Sprintf("%s[%d]", key, i)] = origin{env: name}
			}
			return out, "", ""
		}
		expr, diags := hclsyntax.ParseExpression([]byte(t), name, hcl.InitialPos)
		if diags.HasErrors() {
			return nil, "invalid list " + strconv.Quote(s), `write a comma-separated list, or an HCL list such as ["a{1,2}", "b"]`
		}
		v, diags := expr.Value(nil)
		if diags.HasErrors() || v.IsNull() || !(v.Type().IsTupleType() || v.Type().IsListType()) {
			return nil, "invalid list " + strconv.Quote(s), `write a comma-separated list, or an HCL list such as ["a{1,2}", "b"]`
		}
		out := []string{}
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			if e.IsNull() || e.Type() != cty.String {
				return nil, "invalid list " + strconv.Quote(s), `every element must be a string in double quotes`
			}
			d.origins[fmt.Sprintf("%s[%d]", key, len(out))] = origin{env: name}
			out = append(out, e.AsString())
		}
		return out, "", ""
	case kindMap:
		return envMap(s, name, key, d)
	}
	return nil, "unsupported key kind", "report this as a bug"
}

const envMapHint = `write comma-separated key=value pairs, or an HCL map such as {key = "value"}`

// envMap converts an override of a map: key=value pairs separated by
// commas, or an HCL map ({key = "value"}) for values with commas.
func envMap(s, name, key string, d *decoder) (any, string, string) {
	t := strings.TrimSpace(s)
	out := map[string]string{}
	if !strings.HasPrefix(t, "{") {
		for part := range strings.SplitSeq(t, ",") {
			if part = strings.TrimSpace(part); part == "" {
				continue
			}
			k, v, ok := strings.Cut(part, "=")
			k = strings.TrimSpace(k)
			if !ok || k == "" {
				return nil, "invalid map entry " + strconv.Quote(part), envMapHint
			}
			if _, dup := out[k]; dup {
				return nil, fmt.Sprintf("%s is set twice", k), "keep one"
			}
			out[k] = strings.TrimSpace(v)
			d.origins[joinKey(key, k)] = origin{env: name}
		}
		return out, "", ""
	}
	expr, diags := hclsyntax.ParseExpression([]byte(t), name, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, "invalid map", envMapHint
	}
	pairs, diags := hcl.ExprMap(expr)
	if diags.HasErrors() {
		return nil, "invalid map", envMapHint
	}
	for _, p := range pairs {
		k, kd := p.Key.Value(nil)
		v, vd := p.Value.Value(nil)
		if kd.HasErrors() || vd.HasErrors() || k.IsNull() || v.IsNull() || k.Type() != cty.String || v.Type() != cty.String {
			return nil, "invalid map", "every key and value must be a string"
		}
		if _, dup := out[k.AsString()]; dup {
			return nil, fmt.Sprintf("%s is set twice", k.AsString()), "keep one"
		}
		out[k.AsString()] = v.AsString()
		d.origins[joinKey(key, k.AsString())] = origin{env: name}
	}
	return out, "", ""
}
