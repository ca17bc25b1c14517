"""An OpenAI-compatible API (``/v1``) on the HTTP binding, for any model that follows the
text-generation convention of Triton's LLM backends (:mod:`pbd.http.openai.convention`)."""
