"""Reference memory systems (long-context, RAG, Mem0-style, episodic), instrumented, offline by default."""
