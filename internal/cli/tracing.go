package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"

	"reprise"
	"reprise/otel"
)

// tracesOn reads OpenTelemetry's environment variables: whether the
// server exports traces over OTLP. It does when OTEL_TRACES_EXPORTER is
// "otlp", or when it is unset and an OTLP endpoint is given
// (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT); never
// when OTEL_SDK_DISABLED is "true" or OTEL_TRACES_EXPORTER is "none".
// Unlike the SDKs' default, traces are off unless asked for.
func tracesOn(getenv func(string) string) (bool, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return false, nil
	}
	on := false
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "":
		on = getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	case "none":
		return false, nil
	case "otlp":
		on = true
	default:
		return false, fmt.Errorf("OTEL_TRACES_EXPORTER %q: reprise server exports traces with otlp, or none", exp)
	}
	if !on {
		return false, nil
	}
	proto := getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	if proto != "" && proto != "http/protobuf" {
		return false, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: reprise server sends OTLP as http/protobuf only", proto)
	}
	return true, nil
}

// serverTracer returns the Tracer of reprise server: nil when traces are
// off (tracesOn), else one that exports over OTLP/HTTP in batches, to the
// endpoint, headers and timeout of the OTEL_EXPORTER_OTLP_* variables, as
// service "reprise" unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES
// say otherwise, sampled as OTEL_TRACES_SAMPLER says.
func serverTracer(ctx context.Context) (*otel.Tracer, error) {
	on, err := tracesOn(os.Getenv)
	if err != nil || !on {
		return nil, err
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	env, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	res, err := resource.Merge(resource.NewSchemaless(semconv.ServiceName("reprise")), env)
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	return otel.New(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)), nil
}

// shutdownTracer exports the spans left, for a few seconds at most.
func shutdownTracer(ctx context.Context, t *otel.Tracer) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := t.Shutdown(ctx); err != nil {
		return fmt.Errorf("export the last spans: %w", err)
	}
	return nil
}

// observers tells each of its Observers every event, in order.
type observers []reprise.Observer

var _ reprise.Observer = observers(nil)

func (o observers) AttemptStarted(a reprise.AttemptInfo) {
	for _, x := range o {
		x.AttemptStarted(a)
	}
}

func (o observers) AttemptEnded(a reprise.AttemptEnd) {
	for _, x := range o {
		x.AttemptEnded(a)
	}
}

func (o observers) LeaseLapsed(a reprise.AttemptInfo) {
	for _, x := range o {
		x.LeaseLapsed(a)
	}
}

func (o observers) StaleResultRefused(a reprise.AttemptInfo) {
	for _, x := range o {
		x.StaleResultRefused(a)
	}
}

func (o observers) RunEnded(r reprise.RunEnd) {
	for _, x := range o {
		x.RunEnded(r)
	}
}

func (o observers) EngineBusy() {
	for _, x := range o {
		x.EngineBusy()
	}
}

func (o observers) EngineIdle(steps int) {
	for _, x := range o {
		x.EngineIdle(steps)
	}
}
