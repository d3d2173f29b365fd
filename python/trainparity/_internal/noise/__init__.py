"""The noise envelope, one room for every check and `diff`.

policy (NoiseComparison), envelope (one step measured and judged), walk
(steps judged in order), verdict (the decision's outcome and message).
"""
