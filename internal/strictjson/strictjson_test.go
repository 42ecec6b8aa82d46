package strictjson_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/go-json-experiment/json/jsontext"

	"reprise/internal/strictjson"
)

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		json string
		want error  // matched with errors.Is, or nil
		says string // in the error
	}{
		{`{"a": [1, "x", {"b": null}], "c": 1e400}`, nil, ""},
		{`  "text"  `, nil, ""},
		{``, strictjson.ErrEmpty, "no JSON value"},
		{" \n\t", strictjson.ErrEmpty, "no JSON value"},
		{`1 2`, strictjson.ErrTrailing, "more than one"},
		{`{} x`, strictjson.ErrTrailing, "more than one"},
		{`{"a": 1, "a": 2}`, jsontext.ErrDuplicateName, `duplicate object member name "a"`},
		{`[{"b": {"a": 1, "a": 2}}]`, jsontext.ErrDuplicateName, `duplicate`},
		{`"\u0000"`, nil, `the string at the top holds a NUL`},
		{`{"a": [1, "x\u0000"]}`, nil, `the string at "/a/1" holds a NUL`},
		{`{"a": {"\u0000": 1}}`, nil, `a member's name in "/a" holds a NUL`},
		{`"\ud800"`, nil, "invalid surrogate pair"},
		{"\"\xff\"", nil, "invalid UTF-8"},
		{`{"a": `, nil, "unexpected EOF"},
		{strings.Repeat("[", 20000), nil, "exceeded max depth"},
	} {
		err := strictjson.Check([]byte(c.json))
		switch {
		case c.says == "" && err != nil:
			t.Errorf("Check(%.40q) = %v, want nil", c.json, err)
		case c.says == "":
		case err == nil || !strings.Contains(err.Error(), c.says):
			t.Errorf("Check(%.40q) = %v, want an error saying %q", c.json, err, c.says)
		case c.want != nil && !errors.Is(err, c.want):
			t.Errorf("Check(%.40q) = %v, want %v", c.json, err, c.want)
		}
	}
}
