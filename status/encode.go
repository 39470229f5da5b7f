package status

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// chunkBytes is how much JSON of list elements encode gathers before it
// renders them as YAML: with the output, the bound of its memory.
const chunkBytes = 16 << 10

// encode renders doc (a struct whose JSON form is an object) as a status
// document: header, format, then the other keys sorted.
//
// The bytes are those of rendering the whole JSON form with one yaml.v3
// encoder (indent 2), but a long list does not go through one generic
// value: each non-empty slice field of doc is rendered a chunk of
// elements at a time, by emitYAML's emitter, as yaml.v3 writes a
// sequence under a top-level key. The other keys are rendered in runs
// between the lists, in the order yaml.v3 sorts the whole key set. A
// list holding what the emitter leaves to yaml.v3 (a string with a line
// break other than LF: yaml.v3 does not always indent the line after
// it) has the whole document rendered as one generic value.
func encode(doc any) ([]byte, error) { return encodeChunked(doc, chunkBytes) }

// errWhole: a list holds what emitYAML leaves to yaml.v3 (a complex key,
// a line break other than LF), which only yaml.v3 rendering the whole
// document places right.
var errWhole = errors.New("list left to yaml.v3")

// encodeChunked is encode rendering list elements chunk bytes of JSON at a
// time (at least one element per chunk).
func encodeChunked(doc any, chunk int) ([]byte, error) {
	out, err := encodeLists(doc, chunk)
	if errors.Is(err, errWhole) {
		return encodeWhole(doc)
	}
	return out, err
}

// encodeWhole renders doc's whole JSON form as one generic value.
func encodeWhole(doc any) ([]byte, error) {
	data, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return RenderJSON(data)
}

// RenderJSON renders a document from its JSON form (a Node's from
// NodeJSON, a RolloutPart's from encoding/json): the bytes its Encode
// function writes. A caller that keeps the JSON form to tell whether a
// document changed renders it without encoding it twice.
func RenderJSON(data []byte) ([]byte, error) {
	generic, err := decodeJSONObject(data)
	if err != nil {
		return nil, err
	}
	delete(generic, "format")
	b := startDoc()
	if len(generic) == 0 {
		return b.Bytes(), nil
	}
	// the YAML is about as long as the JSON: grown once, not by doubling
	b.Grow(len(data) + len(data)/4)
	if err := encodeYAML(b, generic); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// startDoc returns a document's first lines: the header and the format.
func startDoc() *bytes.Buffer {
	b := new(bytes.Buffer)
	b.WriteString(header)
	b.WriteString("format: " + strconv.Itoa(Version) + "\n")
	return b
}

// encodeLists is encodeChunked but for errWhole.
func encodeLists(doc any, chunk int) ([]byte, error) {
	rest, lists := splitLists(doc)
	data, err := json.Marshal(rest)
	if err != nil {
		return nil, err
	}
	generic, err := decodeJSONObject(data)
	if err != nil {
		return nil, err
	}
	delete(generic, "format")
	byName := make(map[string]reflect.Value, len(lists))
	for _, l := range lists {
		// The emptied field is written as null, or left out (omitempty).
		delete(generic, l.name)
		byName[l.name] = l.elems
	}
	b := startDoc()
	if len(generic)+len(lists) == 0 {
		return b.Bytes(), nil
	}
	if len(lists) == 0 {
		if err := encodeYAML(b, generic); err != nil {
			return nil, err
		}
		return b.Bytes(), nil
	}
	order := keyOrder(generic, lists)
	w := listWriter{out: b, chunk: chunk}
	run := map[string]any{}
	for _, k := range order {
		elems, isList := byName[k]
		if !isList {
			run[k] = generic[k]
			continue
		}
		if len(run) > 0 {
			if err := encodeYAML(b, run); err != nil {
				return nil, err
			}
			clear(run)
		}
		if err := w.write(k, elems); err != nil {
			if errors.Is(err, errWhole) {
				return nil, err
			}
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	if len(run) > 0 {
		if err := encodeYAML(b, run); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// list is a non-empty slice field of a document and its JSON name.
type list struct {
	name  string
	elems reflect.Value
}

var (
	jsonMarshaler = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

// splitLists returns doc with its non-empty slice fields emptied, and
// those fields. It splits only what encoding/json writes as a plain
// array under the field's own name: doc is a struct without embedded
// fields or JSON methods, the field's type has no methods, its elements
// are no bytes (base64), its JSON name is one no other field has (and
// not format, which the header writes). Any other doc is returned
// whole, with no lists.
func splitLists(doc any) (any, []list) {
	v := reflect.ValueOf(doc)
	if !v.IsValid() || v.Kind() != reflect.Struct || hasJSONMethods(v.Type()) {
		return doc, nil
	}
	t := v.Type()
	seen := map[string]int{}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			return doc, nil
		}
		if name, ok := jsonName(f); ok {
			seen[name]++
		}
	}
	var lists []list
	var rest reflect.Value
	for i := range t.NumField() {
		f := t.Field(i)
		name, ok := jsonName(f)
		if !ok || seen[name] != 1 || name == "format" || f.Type.Kind() != reflect.Slice || f.Type.Elem().Kind() == reflect.Uint8 ||
			f.Type.NumMethod() != 0 || reflect.PointerTo(f.Type).NumMethod() != 0 || v.Field(i).Len() == 0 {
			continue
		}
		if !rest.IsValid() {
			rest = reflect.New(t).Elem()
			rest.Set(v)
		}
		lists = append(lists, list{name: name, elems: v.Field(i)})
		rest.Field(i).SetZero()
	}
	if len(lists) == 0 {
		return doc, nil
	}
	return rest.Interface(), lists
}

func hasJSONMethods(t reflect.Type) bool {
	p := reflect.PointerTo(t)
	return t.Implements(jsonMarshaler) || p.Implements(jsonMarshaler) || t.Implements(textMarshaler) || p.Implements(textMarshaler)
}

// jsonName is the name encoding/json writes exported field f under, when
// it is one made only of letters, digits, '_' and '-' (any other is left
// to encoding/json, which may fall back to the Go name).
func jsonName(f reflect.StructField) (string, bool) {
	if !f.IsExported() {
		return "", false
	}
	tag := f.Tag.Get("json")
	if tag == "-" {
		return "", false
	}
	name, _, _ := bytes.Cut([]byte(tag), []byte(","))
	if len(name) == 0 {
		return f.Name, true
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return "", false
		}
	}
	return string(name), true
}

// keyOrder is the order yaml.v3 writes the keys of generic and the lists
// in (its order is not byte order: digit runs compare as numbers).
func keyOrder(generic map[string]any, lists []list) []string {
	order := make([]string, 0, len(generic)+len(lists))
	for k := range generic {
		order = append(order, k)
	}
	for _, l := range lists {
		order = append(order, l.name)
	}
	sort.Sort(keyOrderList(order))
	return order
}

// listWriter renders lists into out; its buffers are reused from list to
// list.
type listWriter struct {
	out   *bytes.Buffer
	chunk int
	js    bytes.Buffer // JSON of the element being converted
	elems []any        // the generic values of the chunk
}

// write renders key and its non-empty list elems as yaml.v3 would under a
// top-level key.
func (w *listWriter) write(key string, elems reflect.Value) error {
	// The key as yaml.v3 writes it (quoted if it must be).
	head, ok := keyScalar(key)
	if !ok {
		return errWhole
	}
	w.out.WriteString(head)
	w.out.WriteString(":\n")
	// Strings of a type without methods are their own generic value when
	// valid UTF-8 (encoding/json would replace invalid bytes).
	plain := elems.Type().Elem().Kind() == reflect.String && elems.Type().Elem().NumMethod() == 0
	enc := json.NewEncoder(&w.js)
	enc.SetEscapeHTML(false)
	size, start, sized := 0, w.out.Len(), false
	for i := range elems.Len() {
		ev := elems.Index(i)
		if plain && utf8.ValidString(ev.String()) {
			w.elems = append(w.elems, ev.String())
			size += ev.Len() + 2
		} else {
			w.js.Reset()
			if err := enc.Encode(ev.Interface()); err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
			size += w.js.Len()
			e, err := decodeJSON(w.js.Bytes())
			if err != nil {
				return fmt.Errorf("element %d: %w", i, err)
			}
			w.elems = append(w.elems, e)
		}
		if size >= w.chunk {
			if err := w.flush(); err != nil {
				return err
			}
			size = 0
			if !sized {
				// Room for the rest at the size of the first chunk (and
				// some): the output then grows once, not by doubling.
				sized = true
				w.out.Grow((w.out.Len() - start) / (i + 1) * (elems.Len() - i - 1) * 9 / 8)
			}
		}
	}
	if len(w.elems) > 0 {
		return w.flush()
	}
	return nil
}

// flush renders the gathered elements as yaml.v3 renders them in a
// sequence under a top-level key.
func (w *listWriter) flush() error {
	ok := emitSequence(w.out, w.elems, 2)
	clear(w.elems)
	w.elems = w.elems[:0]
	if !ok {
		return errWhole
	}
	return nil
}

// encodeYAML appends v, a generic value, as one YAML document (indent 2)
// to b, the bytes yaml.v3 writes.
func encodeYAML(b *bytes.Buffer, v any) error {
	if emitYAML(b, v) {
		return nil
	}
	return encodeYAMLv3(b, v)
}

// encodeYAMLv3 is encodeYAML through yaml.v3's encoder.
func encodeYAMLv3(b *bytes.Buffer, v any) error {
	enc := yaml.NewEncoder(b)
	enc.SetIndent(2)
	if err := enc.Encode(v); err != nil {
		return err
	}
	return enc.Close()
}

// decodeJSONObject reads a JSON object with its numbers made int64 (or
// float64), as numbers does.
func decodeJSONObject(data []byte) (map[string]any, error) {
	v, err := decodeJSON(data)
	if err != nil {
		return nil, err
	}
	switch v := v.(type) {
	case map[string]any:
		return v, nil
	case nil:
		return nil, nil
	default:
		return nil, fmt.Errorf("json: want an object, got %T", v)
	}
}
