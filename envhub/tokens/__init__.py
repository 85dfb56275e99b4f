"""Token plumbing shared by policies and trainers: loading tokenizers (:mod:`.tokenizers`),
tool calls out of raw model text (:mod:`.tool_call_parsers`), prompt ids from a chat
template (:mod:`.chat_template`) and what a token sampler returns (:mod:`.sample`).

It sits below :mod:`envhub.policies` and :mod:`envhub.trainers`, so neither imports the
other for token work.
"""
