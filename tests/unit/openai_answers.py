"""One chat answer as an OpenAI-compatible server sends it, for the transport's unit tests
(a raw asyncio server stands in for the model server there): ``ANSWER`` non-streamed,
``EVENTS`` the same answer as an event stream ending in ``[DONE]``."""

from __future__ import annotations

import json

ANSWER = json.dumps({"choices": [{"message": {"role": "assistant", "content": "ok"},
                                  "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 3, "completion_tokens": 1}}).encode()
EVENTS = (b'data: {"choices":[{"delta":{"content":"ok"},"finish_reason":"stop"}]}\n\n'
          b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
          b"data: [DONE]\n\n")
