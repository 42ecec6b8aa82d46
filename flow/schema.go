package flow

import (
	"bytes"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// An inputSchema is a flow's compiled input_schema.
type inputSchema struct {
	s *jsonschema.Schema
}

// schemaURL names a flow's input_schema among schemas; nothing else is
// loaded: a $ref must point inside the schema.
const schemaURL = "urn:reprise:flow:input_schema"

// refuseLoader loads no schema from anywhere: a flow file must not make
// the engine read files or call URLs.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s: a schema may only refer inside itself", url)
}

func compileSchema(doc []byte) (*inputSchema, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(schemaURL, v); err != nil {
		return nil, err
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, err
	}
	return &inputSchema{s: s}, nil
}

// check reports whether input (JSON) matches the schema.
func (s *inputSchema) check(input []byte) error {
	if len(input) == 0 {
		input = []byte("null")
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(input))
	if err != nil {
		return fmt.Errorf("input is not JSON: %w", err)
	}
	if err := s.s.Validate(v); err != nil {
		return fmt.Errorf("input does not match the flow's input_schema: %w", err)
	}
	return nil
}
