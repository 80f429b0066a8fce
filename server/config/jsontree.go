package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// node is a parsed JSON value that keeps object key order and the raw text of
// numbers, so that duplicate keys can be rejected and integers told apart
// from 1.5 or 1e3.
type node struct {
	kind   byte // 'o' object, 'a' array, 's' string, 'n' number, 'b' bool, 'z' null
	keys   []string
	fields map[string]*node
	items  []*node
	str    string // string value, or the number's literal text
	b      bool
}

func parseTree(data []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := readNode(dec, "")
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("invalid JSON: unexpected data after the top-level value")
	}
	return n, nil
}

func readNode(dec *json.Decoder, path string) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, invalidJSON(err)
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			n := &node{kind: 'o', fields: map[string]*node{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, invalidJSON(err)
				}
				key := kt.(string)
				sub := joinPath(path, key)
				if _, dup := n.fields[key]; dup {
					return nil, fmt.Errorf("duplicate key %q", sub)
				}
				v, err := readNode(dec, sub)
				if err != nil {
					return nil, err
				}
				n.keys = append(n.keys, key)
				n.fields[key] = v
			}
			if _, err := dec.Token(); err != nil {
				return nil, invalidJSON(err)
			}
			return n, nil
		case '[':
			n := &node{kind: 'a'}
			for i := 0; dec.More(); i++ {
				v, err := readNode(dec, fmt.Sprintf("%s[%d]", path, i))
				if err != nil {
					return nil, err
				}
				n.items = append(n.items, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, invalidJSON(err)
			}
			return n, nil
		}
		return nil, fmt.Errorf("invalid JSON: unexpected %q", t)
	case string:
		return &node{kind: 's', str: t}, nil
	case json.Number:
		return &node{kind: 'n', str: t.String()}, nil
	case bool:
		return &node{kind: 'b', b: t}, nil
	case nil:
		return &node{kind: 'z'}, nil
	}
	return nil, fmt.Errorf("invalid JSON: unexpected token %v", tok)
}

func invalidJSON(err error) error {
	if err == io.EOF {
		return errors.New("invalid JSON: unexpected end of input")
	}
	return fmt.Errorf("invalid JSON: %v", err)
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func kindName(k byte) string {
	switch k {
	case 'o':
		return "an object"
	case 'a':
		return "an array"
	case 's':
		return "a string"
	case 'n':
		return "a number"
	case 'b':
		return "a boolean"
	}
	return "null"
}

// raw re-encodes n as compact JSON (used to keep values such as slots as given).
func (n *node) raw() string {
	var buf bytes.Buffer
	n.write(&buf)
	return buf.String()
}

func (n *node) write(buf *bytes.Buffer) {
	switch n.kind {
	case 'o':
		buf.WriteByte('{')
		for i, k := range n.keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			kb, _ := json.Marshal(k)
			buf.Write(kb)
			buf.WriteByte(':')
			n.fields[k].write(buf)
		}
		buf.WriteByte('}')
	case 'a':
		buf.WriteByte('[')
		for i, v := range n.items {
			if i > 0 {
				buf.WriteByte(',')
			}
			v.write(buf)
		}
		buf.WriteByte(']')
	case 's':
		b, _ := json.Marshal(n.str)
		buf.Write(b)
	case 'n':
		buf.WriteString(n.str)
	case 'b':
		if n.b {
			buf.WriteString("true")
		} else {
			buf.WriteString("false")
		}
	default:
		buf.WriteString("null")
	}
}
