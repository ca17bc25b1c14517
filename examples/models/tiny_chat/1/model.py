"""A weightless chat model with a real tokenizer: it answers with its prompt's last instruction.

- The tokenizer is Mistral 7B's (sentencepiece, 32000 tokens), loaded from the mistral-common
  package (``MistralTokenizer.v1()``): nothing is downloaded. The special tokens the prompt
  may hold are those ``tokenizer_config.json`` (beside ``config.pbtxt``) declares in
  ``added_tokens_decoder``; ``initialize`` checks that the tokenizer has them under those ids.
- ``text_input``: the prompt, which pbd renders with that file's ``chat_template``
  (``<s>[INST] ... [/INST]answer</s>[INST] ... [/INST]``). It is tokenized as a Hub tokenizer
  tokenizes a rendered template: each special token is its id, the text between is encoded
  without adding BOS or EOS. That count is ``num_input_tokens``.
- The answer is the text of the prompt's last ``[INST] ... [/INST]``, or the whole prompt
  when it has none, encoded and sent back token by token (each response's text is what that
  token adds to the decoded answer). ``max_tokens`` (default 64) bounds it.
- ``stream`` true: one response per token, then the final flag alone; false or absent: one
  response with the whole answer, final. A cancelled request stops at the next token.
"""

import json
import os
import re
import threading

import numpy as np
from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

import triton_python_backend_utils as pb_utils

INSTRUCTION = re.compile(r"\[INST\] (.*?) \[/INST\]", re.DOTALL)


def _scalar(request, name, default):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    if tensor is None:
        return default
    return tensor.as_numpy().reshape(-1)[0]


def _special_tokens(path, tokenizer):
    """{text: id} of the special tokens tokenizer_config.json declares, each checked against
    the tokenizer."""
    with open(path, encoding="utf-8") as file:
        declared = json.load(file).get("added_tokens_decoder", {})
    special = {}
    for token_id, token in declared.items():
        piece = tokenizer.id_to_piece(int(token_id))
        if piece != token["content"]:
            raise pb_utils.TritonModelException(
                f"{path}: token {token_id} is '{token['content']}', the tokenizer's is '{piece}'"
            )
        special[token["content"]] = int(token_id)
    return special


class TritonPythonModel:
    def initialize(self, args):
        self.tokenizer = MistralTokenizer.v1().instruct_tokenizer.tokenizer
        config = os.path.join(args["model_repository"], "tokenizer_config.json")
        self.special = _special_tokens(config, self.tokenizer)
        self.split = re.compile("(" + "|".join(map(re.escape, self.special)) + ")")
        self.threads = []

    def encode(self, text):
        """The ids of a rendered prompt: special tokens as themselves, the rest as text."""
        ids = []
        for part in self.split.split(text):
            if part in self.special:
                ids.append(self.special[part])
            elif part:
                ids.extend(self.tokenizer.encode(part, bos=False, eos=False))
        return ids

    def execute(self, requests):
        for request in requests:
            thread = threading.Thread(target=self.generate, args=(request,), daemon=True)
            thread.start()
            self.threads.append(thread)
        self.threads = [t for t in self.threads if t.is_alive()]
        return None

    def generate(self, request):
        sender = request.get_response_sender()
        prompt = _scalar(request, "text_input", b"").decode("utf-8", "replace")
        stream = bool(_scalar(request, "stream", False))
        max_tokens = max(int(_scalar(request, "max_tokens", 64)), 0)
        prompt_tokens = len(self.encode(prompt))
        instructions = INSTRUCTION.findall(prompt)
        answer = instructions[-1] if instructions else prompt
        ids = self.tokenizer.encode(answer, bos=False, eos=False)[:max_tokens]
        text = ""
        for count in range(1, len(ids) + 1):
            if sender.is_cancelled():
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
                return
            decoded = self.tokenizer.decode(ids[:count])
            if count < len(ids) and decoded.endswith("\ufffd"):
                piece = ""  # part of a character's bytes: it comes with the next token
            else:
                piece, text = decoded[len(text) :], decoded
            if stream:
                sender.send(self.response(piece, prompt_tokens, 1))
        if stream:
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        else:
            sender.send(
                self.response(text, prompt_tokens, len(ids)),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )

    @staticmethod
    def response(text, num_input, num_output):
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("text_output", np.array([text.encode()], dtype=np.object_)),
                pb_utils.Tensor("num_input_tokens", np.array([num_input], dtype=np.int32)),
                pb_utils.Tensor("num_output_tokens", np.array([num_output], dtype=np.int32)),
            ]
        )

    def finalize(self):
        for thread in self.threads:
            thread.join(timeout=10)
