package agent

import (
	"reflect"
	"regexp"
	"testing"

	"github.com/seed83556561/mirrord/config"
	"github.com/seed83556561/mirrord/statestore"
)

// TestLinkSettingsCopiesEveryKey guards against a key added to config.Link
// and link.Settings that linkSettings forgets to copy: every field of
// link.Settings is set from the config.Link field of the same name.
func TestLinkSettingsCopiesEveryKey(t *testing.T) {
	var l config.Link
	v := reflect.ValueOf(&l).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch {
		case !v.Type().Field(i).IsExported():
			continue // what validation alone reads
		case f.Type() == reflect.TypeFor[config.Delivery]():
			f.SetString(string(config.DeliveryTransactional)) // not the default
			continue
		case f.Type() == reflect.TypeFor[config.Unattributed]():
			f.SetString(string(config.UnattributedSkip)) // not the default
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString("v" + v.Type().Field(i).Name)
		case reflect.Int, reflect.Int16, reflect.Int32, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Slice:
			f.Set(reflect.ValueOf([]*regexp.Regexp{regexp.MustCompile(v.Type().Field(i).Name)}))
		case reflect.Struct:
			switch f.Type() {
			case reflect.TypeFor[config.ConfigSync]():
				f.Set(reflect.ValueOf(config.ConfigSync{Enabled: true, AllTopics: true, Include: []string{"min.insync.replicas"},
					Exclude: []*regexp.Regexp{regexp.MustCompile("segment")}}))
			case reflect.TypeFor[config.ACLSync]():
				f.Set(reflect.ValueOf(config.ACLSync{Enabled: true, Write: true}))
			default:
				t.Fatalf("config.Link.%s: a struct of type %s the test does not fill", v.Type().Field(i).Name, f.Type())
			}
		case reflect.Pointer:
			if f.Type() != reflect.TypeFor[*config.Groups]() {
				t.Fatalf("config.Link.%s: a pointer of type %s the test does not fill", v.Type().Field(i).Name, f.Type())
			}
			f.Set(reflect.ValueOf(&config.Groups{Include: []*regexp.Regexp{regexp.MustCompile("billing")}}))
		default:
			t.Fatalf("config.Link.%s: a field of kind %s the test does not fill", v.Type().Field(i).Name, f.Kind())
		}
	}
	got := reflect.ValueOf(linkSettings(&l))
	for i := range got.NumField() {
		name := got.Type().Field(i).Name
		if name == "SkipUnattributed" {
			if !got.Field(i).Bool() {
				t.Errorf("link.Settings.SkipUnattributed = false, want true for unattributed = %q", l.Unattributed)
			}
			continue
		}
		want := v.FieldByName(name)
		if !want.IsValid() {
			t.Errorf("link.Settings.%s has no config.Link field of that name", name)
			continue
		}
		if name == "Delivery" {
			if g := got.Field(i).Interface(); g != statestore.DeliveryTransactional {
				t.Errorf("link.Settings.Delivery = %v, want transactional", g)
			}
			continue
		}
		if g := got.Field(i); !reflect.DeepEqual(g.Interface(), want.Convert(g.Type()).Interface()) {
			t.Errorf("link.Settings.%s = %v, want config.Link's %v", name, g, want)
		}
	}
}

// A link without a groups block syncs no group: its selector is nil, not
// an interface holding a nil *config.Groups.
func TestLinkSettingsWithoutGroups(t *testing.T) {
	if s := linkSettings(&config.Link{}); s.Groups != nil {
		t.Errorf("no groups block: Groups = %#v, want nil", s.Groups)
	}
}
