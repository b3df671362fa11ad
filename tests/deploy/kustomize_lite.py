"""Offline renderer for the subset of kustomize that deploy/k8s uses.

CI machines have no kubectl (it is not a Debian package), so the manifest
test renders overlays itself. Supported: `resources` (files and directories),
`components`, `patches` (strategic merge, by target kind/name), `images`
(newName/newTag) and `labels` (metadata only, includeSelectors: false).
Anything else in a kustomization is an error, so a feature added to the
manifests later cannot be silently ignored here.
"""
import copy
import pathlib

import yaml

_KNOWN_KEYS = {"apiVersion", "kind", "resources", "components", "patches", "images", "labels"}


class KustomizeError(Exception):
    pass


def _load_docs(path: pathlib.Path) -> list:
    with path.open() as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def _merge(base, patch):
    """Strategic merge: maps merge key by key (a null value removes the key);
    lists of maps with a `name` merge item by item (containers, env, ports,
    volumes); other lists and scalars are replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for key, value in patch.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = _merge(base[key], value) if key in base else copy.deepcopy(value)
        return out
    if (isinstance(base, list) and isinstance(patch, list) and
            all(isinstance(i, dict) and "name" in i for i in base + patch)):
        # kustomize's order: the patch's items (merged with their base
        # counterparts) first, then the base items the patch does not name.
        base_by_name = {item["name"]: item for item in base}
        patched = {item["name"] for item in patch}
        out = [_merge(base_by_name[i["name"]], i) if i["name"] in base_by_name else
               copy.deepcopy(i) for i in patch]
        out += [copy.deepcopy(i) for i in base if i["name"] not in patched]
        return out
    return copy.deepcopy(patch)


def _pod_containers(resource: dict) -> list:
    spec = resource.get("spec", {}).get("template", {}).get("spec", {})
    return spec.get("containers", []) + spec.get("initContainers", [])


def _apply_images(resources: list, images: list) -> None:
    for rule in images:
        for res in resources:
            for c in _pod_containers(res):
                name = c.get("image", "").split("@")[0].rsplit(":", 1)[0]
                if name == rule["name"]:
                    c["image"] = f"{rule.get('newName', name)}:{rule['newTag']}"


def _apply_patches(resources: list, patches: list, root: pathlib.Path) -> None:
    for p in patches:
        if "path" not in p:
            raise KustomizeError(f"{root}: only file patches are supported: {p}")
        for patch in _load_docs(root / p["path"]):
            target = p.get("target", {})
            kind = target.get("kind", patch.get("kind"))
            name = target.get("name", patch.get("metadata", {}).get("name"))
            hits = [r for r in resources
                    if r.get("kind") == kind and r.get("metadata", {}).get("name") == name]
            if not hits:
                raise KustomizeError(f"{root / p['path']}: no {kind}/{name} to patch")
            for r in hits:
                merged = _merge(r, patch)
                r.clear()
                r.update(merged)


def render(directory: pathlib.Path, expect_kind: str = "Kustomization") -> list:
    """Returns the resources a kustomization (or component) directory yields."""
    kfile = directory / "kustomization.yaml"
    if not kfile.is_file():
        raise KustomizeError(f"{directory}: no kustomization.yaml")
    (k,) = _load_docs(kfile)
    unknown = set(k) - _KNOWN_KEYS
    if unknown:
        raise KustomizeError(f"{kfile}: unsupported keys {sorted(unknown)}")
    if k.get("kind") != expect_kind:
        raise KustomizeError(f"{kfile}: kind {k.get('kind')!r}, expected {expect_kind}")
    resources = []
    for entry in k.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            resources += render(path)
        elif path.is_file():
            resources += _load_docs(path)
        else:
            raise KustomizeError(f"{kfile}: resource {entry} does not exist")
    for entry in k.get("components", []):
        comp_dir = (directory / entry).resolve()
        (comp,) = _load_docs(comp_dir / "kustomization.yaml")
        resources += render(comp_dir, expect_kind="Component")
        _apply_patches(resources, comp.get("patches", []), comp_dir)
        _apply_images(resources, comp.get("images", []))
    if expect_kind == "Component":
        # A component's patches and images act on the including
        # kustomization's resources; its caller applies them.
        return resources
    _apply_patches(resources, k.get("patches", []), directory)
    _apply_images(resources, k.get("images", []))
    for rule in k.get("labels", []):
        if rule.get("includeSelectors") or rule.get("includeTemplates"):
            raise KustomizeError(f"{kfile}: labels only on metadata are supported")
        for r in resources:
            r.setdefault("metadata", {}).setdefault("labels", {}).update(rule["pairs"])
    return resources
