"""Linked-list and binary-tree arguments for LeetCode `call` problems.

A canonical test passes JSON values, but some LeetCode methods take or return `ListNode`
and `TreeNode` objects. We keep these problems by calling them through an adapter that
the prelude defines: `_Adapter().method(*json_args)` turns the list arguments into nodes
(LeetCode's own `list_node`/`tree_node` construction), calls `Solution().method`, and turns
a node result back into LeetCode's list serialisation (level order, trailing nulls
dropped). Comparing serialisations is the same test as the dataset's `is_same_list` /
`is_same_tree` assertions. The adapter is our code; it runs in the sandbox with the
candidate's solution, never in our process.
"""

from __future__ import annotations

import re

from microcoder.data.literals import Signature

NODE_HELPERS = '''
# --- microcoder: ListNode/TreeNode adapter (see microcoder/data/leetcode_nodes.py) ---
if "ListNode" not in globals():
    class ListNode:
        def __init__(self, val=0, next=None):
            self.val = val
            self.next = next

if "TreeNode" not in globals():
    class TreeNode:
        def __init__(self, val=0, left=None, right=None):
            self.val = val
            self.left = left
            self.right = right


def _mc_list_to_nodes(values):
    head = None
    for value in reversed(values or []):
        head = ListNode(value, head)
    return head


def _mc_tree_to_nodes(values):
    if not values or values[0] is None:
        return None
    root = TreeNode(values[0])
    queue, index, head = [root], 1, 0
    while head < len(queue):
        node = queue[head]
        head += 1
        if index < len(values) and values[index] is not None:
            node.left = TreeNode(values[index])
            queue.append(node.left)
        index += 1
        if index < len(values) and values[index] is not None:
            node.right = TreeNode(values[index])
            queue.append(node.right)
        index += 1
    return root


def _mc_nodes_to_values(result, kind):
    if kind == "list":
        values, seen = [], set()
        while result is not None:
            if id(result) in seen:  # a cycle would never end; report it as a wrong answer
                return ["<cycle>"]
            seen.add(id(result))
            values.append(result.val)
            result = result.next
        return values
    if kind == "tree":
        values, order, position = [], [result], 0
        while position < len(order):
            node = order[position]
            position += 1
            if node is None:
                values.append(None)
                continue
            values.append(node.val)
            order.extend((node.left, node.right))
            if len(order) > 10**6:
                return ["<too large>"]
        while values and values[-1] is None:
            values.pop()
        return values
    return result


def _mc_to_nodes(kind, value):
    if kind == "list":
        return _mc_list_to_nodes(value)
    if kind == "tree":
        return _mc_tree_to_nodes(value)
    if kind == "lists":
        return [_mc_list_to_nodes(item) for item in value]
    if kind == "trees":
        return [_mc_tree_to_nodes(item) for item in value]
    return value
'''

_ADAPTER_CLASS = '''

class _Adapter:
    def {method}(self, *args):
        kinds = {kinds!r}
        args = [_mc_to_nodes(kind, arg) for kind, arg in zip(kinds, args)]
        result = Solution().{method}(*args)
        if {is_node_list!r}:
            return [_mc_nodes_to_values(item, {item_kind!r}) for item in result]
        return _mc_nodes_to_values(result, {return_kind!r})
'''


def node_kind(annotation: str | None) -> str | None:
    """'list' / 'tree' for a ListNode / TreeNode annotation, 'lists' / 'trees' for a list
    of them, None for anything else."""
    if not annotation:
        return None
    for name, kind in (("ListNode", "list"), ("TreeNode", "tree")):
        if name in annotation:
            return kind + "s" if re.match(r"\s*(List|list)\[", annotation) else kind
    return None


def uses_nodes(signature: Signature) -> bool:
    kinds = [node_kind(signature.annotations.get(name)) for name in signature.parameters]
    return any(kinds) or node_kind(signature.returns) is not None


def adapter_prelude(signature: Signature) -> str:
    """Helpers plus an `_Adapter` whose method of the same name wraps `Solution().name`."""
    kinds = [node_kind(signature.annotations.get(name)) for name in signature.parameters]
    return_kind = node_kind(signature.returns)
    # Decided here, not in the generated code: formatting `None[:-1]` into it compiled
    # with a SyntaxWarning on every run.
    is_node_list = return_kind in ("lists", "trees")
    return NODE_HELPERS + _ADAPTER_CLASS.format(
        method=signature.name, kinds=kinds, return_kind=return_kind,
        is_node_list=is_node_list, item_kind=return_kind[:-1] if is_node_list else None,
    )
