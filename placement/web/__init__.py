"""The HTTP vocabulary handlers speak: errors and their JSON bodies, request
and response helpers, handler decorators and microversion negotiation.

It stands below the handlers and above the object layer, and knows nothing
of routes or handlers (doc/architecture.md "Layers")."""
