// Package strictjson checks a JSON value as reprise takes one from outside
// (an API body, a signal's payload from the web page, a command's
// --input): one value, each object's member names given once, every
// string valid UTF-8 without NUL.
package strictjson

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// The errors of a value that is not one value.
var (
	ErrEmpty    = errors.New("no JSON value")
	ErrTrailing = errors.New("more than one JSON value")
)

// A NULError is a string that holds NUL (\u0000), which PostgreSQL's text
// cannot hold: a member's name (Name) or a value, at Pointer (a member's
// name ends the pointer).
type NULError struct {
	Pointer jsontext.Pointer
	Name    bool
}

func (e *NULError) Error() string {
	if e.Name {
		return fmt.Sprintf("a member's name in %s holds a NUL character (\\u0000), which no string may", where(e.Pointer.Parent()))
	}
	return fmt.Sprintf("the string at %s holds a NUL character (\\u0000), which no string may", where(e.Pointer))
}

// where names the value at p.
func where(p jsontext.Pointer) string {
	if p == "" {
		return "the top"
	}
	return strconv.Quote(string(p))
}

// Check reports what is wrong with b as a JSON value reprise takes:
// ErrEmpty, ErrTrailing, a *NULError, or the *jsontext.SyntacticError of
// JSON that does not parse, a name given twice (jsontext.ErrDuplicateName),
// invalid UTF-8 or a lone surrogate among them.
func Check(b []byte) error {
	d := jsontext.NewDecoder(bytes.NewReader(b))
	tok, err := d.ReadToken()
	if errors.Is(err, io.EOF) {
		return ErrEmpty
	}
	for {
		if err != nil {
			return err
		}
		if tok.Kind() == '"' && strings.IndexByte(tok.String(), 0) >= 0 {
			kind, n := d.StackIndex(d.StackDepth())
			return &NULError{Pointer: d.StackPointer(), Name: kind == '{' && n%2 == 1}
		}
		if d.StackDepth() == 0 {
			break
		}
		tok, err = d.ReadToken()
	}
	if _, err := d.ReadToken(); !errors.Is(err, io.EOF) {
		return ErrTrailing
	}
	return nil
}
