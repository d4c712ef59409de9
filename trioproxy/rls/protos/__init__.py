"""Generated protobuf modules (see generate.sh); wire compatible with Envoy's RLS and grpc.health.v1."""
