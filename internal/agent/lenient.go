package agent

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// DecodeLenient decodes a JSON object into the struct v field by field: a field whose value has
// another type than v's (a CLI release that turned a count into a string, a list into an
// object) is left zero and named in the returned list, and the others are still read. So a
// line's outcome and cost survive a change in a field the parser does not need. Nested structs
// (and pointers to them) are decoded the same way. Only a line that is not a JSON object at all
// is an error.
func DecodeLenient(raw []byte, v any) (skipped []string, err error) {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("DecodeLenient: %T is not a pointer to a struct", v)
	}
	// Every line of an agent's output comes through here: the whole-line decode is the common
	// case, and the field-by-field one runs only when it fails.
	if json.Unmarshal(raw, v) == nil {
		return nil, nil
	}
	rv.Elem().SetZero()
	if err := decodeStruct(raw, rv.Elem(), "", &skipped); err != nil {
		return nil, err
	}
	sort.Strings(skipped)
	return skipped, nil
}

func decodeStruct(raw []byte, sv reflect.Value, prefix string, skipped *[]string) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return err
	}
	if fields == nil { // null
		return nil
	}
	t := sv.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		val, ok := fields[name]
		if !ok {
			// encoding/json matches keys case-insensitively; so does this.
			for k, v := range fields {
				if strings.EqualFold(k, name) {
					val, ok = v, true
					break
				}
			}
		}
		if !ok {
			continue
		}
		fv := sv.Field(i)
		if err := json.Unmarshal(val, fv.Addr().Interface()); err == nil {
			continue
		}
		fv.SetZero()
		switch {
		case fv.Kind() == reflect.Struct:
			if decodeStruct(val, fv, prefix+name+".", skipped) == nil {
				continue
			}
			fv.SetZero()
		case fv.Kind() == reflect.Pointer && fv.Type().Elem().Kind() == reflect.Struct:
			nv := reflect.New(fv.Type().Elem())
			if decodeStruct(val, nv.Elem(), prefix+name+".", skipped) == nil {
				fv.Set(nv)
				continue
			}
		}
		*skipped = append(*skipped, prefix+name)
	}
	return nil
}
