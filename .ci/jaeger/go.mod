// Build-only module: pins the Jaeger v2 binary (cmd/jaeger) that the test suite runs.
// Jaeger tags v1.x and v2.x on the same commit; the module proxy serves the v1.x tags,
// and cmd/jaeger at v1.76.0 is the Jaeger v2 (OpenTelemetry Collector based) binary.
module memtrace-otel/ci/jaeger

go 1.24.6

replace github.com/Shopify/sarama => github.com/Shopify/sarama v1.33.0
