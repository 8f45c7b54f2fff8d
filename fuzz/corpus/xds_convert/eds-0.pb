
zipkin"Œ