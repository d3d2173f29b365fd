"""Library integrations: Hugging Face Trainer, Lightning and Accelerate, each behind its own extra.

`trainparity.integrations.huggingface`, `.lightning` and `.accelerate` each
import their library and raise ImportError naming the extra to install when
it is missing; the core package never imports them.
"""
