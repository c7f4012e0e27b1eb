"""Fine-tuning: training examples, length-bucketed batching, the (DP-)SGD loop and LoRA setup."""
