"""Update's training side: the dataset (DESIGN §4.6), its exporters, and the training backends."""
