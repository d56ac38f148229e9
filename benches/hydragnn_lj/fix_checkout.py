"""HydraGNN's own bugs that stop examples/LennardJones at its head, fixed in a checkout
copy (never in an installed HydraGNN, never at import):

    fix_checkout.py <HydraGNN checkout>

Each fix replaces an exact text and fails when that text is not found (another
revision: look again). README.md names them.
"""

import sys
from pathlib import Path

FIXES = [
    # 1. DistDataset cannot store a 0-dim tensor (LJ's forces_pre_scaling_factor):
    #    np.concatenate refuses 0-dim arrays. Stored as 1 element, as it does numpy scalars.
    ("hydragnn/utils/datasets/distdataset.py",
     "                    arr_list.append(data[k].cpu().numpy())\n",
     "                    arr_list.append(np.atleast_1d(data[k].cpu().numpy()))\n"),
    # 2. ...nor a Python int or float (LJ's num_nodes): "Not supported: not tensor nor
    #    numpy array". Stored as numpy scalars are, and num_nodes given back as the int
    #    torch_geometric keeps (a tensor there ends in update_config's JSON: "Object of
    #    type Tensor is not JSON serializable").
    ("hydragnn/utils/datasets/distdataset.py",
     "                elif isinstance(data[k], (np.floating, np.integer)):\n",
     "                elif isinstance(data[k], (np.floating, np.integer, int, float)):\n"),
    ("hydragnn/utils/datasets/distdataset.py",
     "                v = torch.tensor(val[k])\n",
     "                v = torch.tensor(val[k])\n                if k == \"num_nodes\":\n                    v = int(v.item())\n"),
    # 3. hydragnn/utils has no __init__.py (a namespace package): the example's
    #    hydragnn.utils.input_config_parsing.update_config is an AttributeError unless
    #    something imported that module. The example imports it.
    ("examples/LennardJones/LennardJones.py",
     "import hydragnn\n",
     "import hydragnn\nimport hydragnn.utils.input_config_parsing\n"),
]


def main():
    root = Path(sys.argv[1])
    for path, old, new in FIXES:
        text = (root / path).read_text()
        if text.count(old) != 1:
            sys.exit(f"fix_checkout: {path}: the text to fix is not there once: {old.strip()!r}")
        (root / path).write_text(text.replace(old, new))
        print(f"fixed {path}: {new.strip()}")


if __name__ == "__main__":
    main()
