"""Rule definitions, one module per code family. Every module here is imported by mpdoctor.registry.load_rules."""
