"""MeshField: distances against brute force and analytic shapes, signs, winding numbers, cap, errors."""

import numpy as np
import pytest

from navi_nb.world.mesh_field import MeshField
from navi_nb.world.mesh_io import Mesh, MeshError, read_mesh
from navi_nb.world.mesh_scene import (
    ROOM_MAX,
    ROOM_MIN,
    TARGET_TRIANGLES,
    WALL,
    benchmark_mesh_scene,
    box_mesh,
    icosphere,
    merge_meshes,
    sample_mesh_path,
    torus_mesh,
)

# ---------------------------------------------------------------- independent answers


def brute_distance(vertices, faces, points):
    """Unsigned distance to the nearest triangle, every triangle, float64.

    A second method (not Ericson's region walk): project onto the plane, keep
    the projection when its barycentric coordinates are all >= 0, else take
    the nearest of the three edge segments.
    """
    tri = vertices[faces]
    a, b, c = tri[:, 0], tri[:, 1], tri[:, 2]
    n = np.cross(b - a, c - a)
    n /= np.linalg.norm(n, axis=1, keepdims=True)
    out = np.empty(len(points))
    for i, p in enumerate(points):
        h = np.einsum("ij,ij->i", p - a, n)
        q = p - h[:, None] * n
        inside = (
            (np.einsum("ij,ij->i", np.cross(b - a, q - a), n) >= 0)
            & (np.einsum("ij,ij->i", np.cross(c - b, q - b), n) >= 0)
            & (np.einsum("ij,ij->i", np.cross(a - c, q - c), n) >= 0)
        )
        best = np.where(inside, np.abs(h), np.inf)
        for u, v in ((a, b), (b, c), (c, a)):
            e = v - u
            t = np.clip(np.einsum("ij,ij->i", p - u, e) / np.einsum("ij,ij->i", e, e), 0, 1)
            best = np.minimum(best, np.linalg.norm(p - (u + t[:, None] * e), axis=1))
        out[i] = best.min()
    return out


def brute_winding(vertices, faces, points):
    """Exact generalised winding number: the sum of all triangle solid angles (Van Oosterom) / 4 pi."""
    tri = vertices[faces]
    out = np.empty(len(points))
    for i, p in enumerate(points):
        a, b, c = tri[:, 0] - p, tri[:, 1] - p, tri[:, 2] - p
        la, lb, lc = (np.linalg.norm(x, axis=1) for x in (a, b, c))
        det = np.einsum("ij,ij->i", a, np.cross(b, c))
        den = (
            la * lb * lc
            + np.einsum("ij,ij->i", a, b) * lc
            + np.einsum("ij,ij->i", b, c) * la
            + np.einsum("ij,ij->i", c, a) * lb
        )
        out[i] = (2 * np.arctan2(det, den)).sum() / (4 * np.pi)
    return out


def box_sdf(p, lo, hi):
    c = (np.asarray(lo) + hi) / 2
    h = (np.asarray(hi) - lo) / 2
    q = np.abs(p - c) - h
    return np.linalg.norm(np.maximum(q, 0), axis=1) + np.minimum(q.max(axis=1), 0)


RNG = np.random.default_rng(7)


# ---------------------------------------------------------------- distances


def test_box_exact_against_analytic():
    lo, hi = np.array([-1.0, -0.5, -2.0]), np.array([1.5, 0.75, 0.25])
    m = box_mesh(lo, hi)
    f = MeshField(m.vertices, m.faces)
    assert f.closed and f.n_faces == 12 and f.n_degenerate == 0
    np.testing.assert_array_equal(f.bounds_min, lo)
    np.testing.assert_array_equal(f.bounds_max, hi)
    p = RNG.uniform(-3, 3, (20000, 3))
    sdf, cls = f.evaluate(p)
    assert sdf.dtype == np.float64 and cls.dtype == np.int32 and np.all(cls == 1)
    np.testing.assert_allclose(sdf, box_sdf(p, lo, hi), rtol=0, atol=1e-12)


def test_icosphere_against_brute_force_and_sphere():
    m = icosphere(3, radius=1.3, center=(0.2, -0.1, 0.4))
    f = MeshField(m.vertices, m.faces)
    assert f.closed
    p = RNG.uniform(-2, 2, (600, 3)) + (0.2, -0.1, 0.4)
    # include points right at the surface and at vertices
    p = np.concatenate([p, m.vertices[:50] * 1.0, m.vertices[50:100] + RNG.normal(0, 1e-3, (50, 3))])
    sdf, _ = f.evaluate(p)
    np.testing.assert_allclose(np.abs(sdf), brute_distance(m.vertices, m.faces, p), rtol=0, atol=1e-12)
    r = np.linalg.norm(p - (0.2, -0.1, 0.4), axis=1)
    # the mesh lies inside the sphere, within the chord sag of a level-3 icosphere (< 2 %)
    far = np.abs(r - 1.3) > 0.05
    np.testing.assert_array_equal(np.sign(sdf[far]), np.sign(r[far] - 1.3))
    np.testing.assert_allclose(sdf[far], r[far] - 1.3, atol=0.03)


def test_torus_signs_against_analytic():
    m = torus_mesh(1.0, 0.35, 48, 24)
    f = MeshField(m.vertices, m.faces)
    assert f.closed
    p = RNG.uniform(-1.6, 1.6, (20000, 3))
    q = np.stack([np.hypot(p[:, 0], p[:, 2]) - 1.0, p[:, 1]], axis=1)
    exact = np.linalg.norm(q, axis=1) - 0.35
    sdf, _ = f.evaluate(p)
    far = np.abs(exact) > 0.02
    np.testing.assert_array_equal(np.sign(sdf[far]), np.sign(exact[far]))
    np.testing.assert_allclose(sdf, exact, atol=0.02)


def test_room_shell_nested_boxes():
    """The benchmark room: outer box plus inward-facing inner box; solid only in the shell."""
    m, cls = benchmark_mesh_scene()
    room = Mesh(m.vertices, m.faces[cls == 1])
    f = MeshField(room.vertices, room.faces)
    assert f.closed and f.n_components == 2 and f.n_closed_components == 2
    p = RNG.uniform(ROOM_MIN - 1, ROOM_MAX + 1, (20000, 3))
    exact = np.maximum(box_sdf(p, ROOM_MIN - WALL, ROOM_MAX + WALL), -box_sdf(p, ROOM_MIN, ROOM_MAX))
    sdf, _ = f.evaluate(p)
    np.testing.assert_allclose(sdf, exact, atol=1e-12)
    fw = MeshField(room.vertices, room.faces, sign="winding")
    sw, _ = fw.evaluate(p)
    np.testing.assert_allclose(sw, exact, atol=1e-12)


# ---------------------------------------------------------------- winding numbers and open meshes


def test_winding_number_against_exact_sum():
    meshes = [icosphere(2), torus_mesh(1.0, 0.3, 24, 12)]
    open_box = box_mesh()
    meshes.append(Mesh(open_box.vertices, open_box.faces[2:]))  # no -z side: open
    for m in meshes:
        f = MeshField(m.vertices, m.faces)
        p = RNG.uniform(-1.5, 1.5, (400, 3))
        d = brute_distance(m.vertices, m.faces, p)
        p = p[d > 0.02]
        # first-order far field at beta = 2: errors of a few hundredths, far below the 0.5 a sign needs
        np.testing.assert_allclose(f.winding_number(p), brute_winding(m.vertices, m.faces, p), atol=0.06)


def test_open_mesh_sign_is_winding_number():
    b = box_mesh()
    m = Mesh(b.vertices, b.faces[2:])  # box missing its -z side
    f = MeshField(m.vertices, m.faces)
    assert not f.closed and f.n_closed_components == 0
    p = RNG.uniform(-2, 2, (2000, 3))
    d = brute_distance(m.vertices, m.faces, p)
    sdf, _ = f.evaluate(p)
    np.testing.assert_allclose(np.abs(sdf), d, atol=1e-12)
    w = brute_winding(m.vertices, m.faces, p)
    clear = np.abs(w - 0.5) > 0.05
    np.testing.assert_array_equal(sdf[clear] < 0, w[clear] >= 0.5)
    fu = MeshField(m.vertices, m.faces, sign="unsigned")
    su, _ = fu.evaluate(p)
    np.testing.assert_allclose(su, d, atol=1e-12)


def test_mixed_closed_and_open_components():
    """auto: pseudonormal near the closed sphere, winding number near the open box."""
    s = icosphere(2, 0.5, (2.0, 0.0, 0.0))
    b = box_mesh()
    ob = Mesh(b.vertices, b.faces[2:])
    m = merge_meshes([s, ob])
    f = MeshField(m.vertices, m.faces)
    assert f.n_components == 2 and f.n_closed_components == 1 and not f.closed
    p = RNG.uniform((-1.5, -1.5, -1.5), (3.0, 1.5, 1.5), (3000, 3))
    d = brute_distance(m.vertices, m.faces, p)
    w = brute_winding(m.vertices, m.faces, p)
    sdf, _ = f.evaluate(p)
    np.testing.assert_allclose(np.abs(sdf), d, atol=1e-12)
    clear = np.abs(w - 0.5) > 0.05
    np.testing.assert_array_equal(sdf[clear] < 0, w[clear] >= 0.5)


# ---------------------------------------------------------------- cap, classes, threads, errors


def test_cap_returns_cap_beyond_and_exact_within():
    m = merge_meshes([box_mesh((-1, -1, -1), (1, 1, 1)), icosphere(2, 0.5, (3, 0, 0))])
    cl = np.r_[np.full(12, 4), np.full(320, 9)].astype(np.int32)
    f = MeshField(m.vertices, m.faces, classes=cl)
    p = RNG.uniform(-3, 5, (5000, 3))
    full, fcls = f.evaluate(p)
    capped, ccls = f.evaluate(p, cap=0.3)
    within = np.abs(full) < 0.3
    np.testing.assert_array_equal(capped[within], full[within])
    np.testing.assert_array_equal(ccls[within], fcls[within])
    beyond = np.abs(full) > 0.3
    np.testing.assert_array_equal(np.abs(capped[beyond]), 0.3)
    np.testing.assert_array_equal(np.sign(capped[beyond]), np.sign(full[beyond]))
    assert np.all(ccls[beyond] == 0)
    # classes: the nearest face's class
    near_box = box_sdf(p, (-1, -1, -1), (1, 1, 1)) < np.linalg.norm(p - (3, 0, 0), axis=1) - 0.5 - 0.02
    near_sph = box_sdf(p, (-1, -1, -1), (1, 1, 1)) > np.linalg.norm(p - (3, 0, 0), axis=1) - 0.5 + 0.02
    assert np.all(fcls[near_box] == 4) and np.all(fcls[near_sph] == 9)


def test_threads_give_identical_results():
    import numba

    m, cls = benchmark_mesh_scene()
    f = MeshField(m.vertices, m.faces, cls)
    p = RNG.uniform(f.bounds_min, f.bounds_max, (3000, 3))
    saved = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        a = f.evaluate(p)
        numba.set_num_threads(saved)
        b = f.evaluate(p)
    finally:
        numba.set_num_threads(saved)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_degenerate_faces_dropped_and_counted():
    b = box_mesh()
    v = np.concatenate([b.vertices, [[0.0, 0.0, 1.0], [0.5, 0.5, 1.0]]])  # a point on the +z face
    faces = np.concatenate([b.faces, [[0, 0, 1], [4, 8, 9], [6, 8, 9]]])  # repeated index, collinear x2
    f = MeshField(v, faces)
    assert f.n_degenerate == 3 and f.n_faces == 12 and f.closed
    p = RNG.uniform(-2, 2, (1000, 3))
    np.testing.assert_allclose(f.evaluate(p)[0], box_sdf(p, (-1, -1, -1), (1, 1, 1)), atol=1e-12)


def test_bad_input_raises_mesh_error():
    b = box_mesh()
    with pytest.raises(MeshError, match="out of range"):
        MeshField(b.vertices, b.faces + 5)
    with pytest.raises(MeshError, match="not finite"):
        MeshField(np.where(np.arange(24).reshape(8, 3) == 5, np.nan, b.vertices), b.faces)
    with pytest.raises(MeshError, match="classes"):
        MeshField(b.vertices, b.faces, classes=np.ones(3, np.int32))
    with pytest.raises(MeshError, match="degenerate"):
        MeshField(np.zeros((3, 3)), [[0, 1, 2]])
    with pytest.raises(MeshError, match="sign"):
        MeshField(b.vertices, b.faces, sign="maybe")
    f = MeshField(b.vertices, b.faces)
    with pytest.raises(MeshError, match="shape"):
        f.evaluate(np.zeros((4, 2)))
    with pytest.raises(MeshError, match="point 1 is not finite"):
        f.evaluate(np.array([[0.0, 0, 0], [np.nan, 0, 0]]))
    with pytest.raises(MeshError, match="cap"):
        f.evaluate(np.zeros((4, 3)), cap=0.0)


# ---------------------------------------------------------------- the benchmark scene


def test_benchmark_scene():
    """The shipped meshes in the room: counts, classes, distances against brute force, signs."""
    m, cls = benchmark_mesh_scene()
    assert abs(m.faces.shape[0] - TARGET_TRIANGLES) < 0.05 * TARGET_TRIANGLES
    assert set(np.unique(cls)) == {1, 2} and (cls == 1).sum() == 24
    f = MeshField(m.vertices, m.faces, cls)
    assert not f.closed and f.n_degenerate == 0  # the teapots and rabbits are open
    p = RNG.uniform(f.bounds_min, f.bounds_max, (40, 3))
    sdf, fcls = f.evaluate(p)
    np.testing.assert_allclose(np.abs(sdf), brute_distance(m.vertices, m.faces, p), atol=1e-12)
    # the room's free middle is outside, the walls inside; the class is the nearest face's
    sdf, fcls = f.evaluate(np.array([[0.0, 2.8, 0.0], [0.0, -WALL / 2, 0.0], [ROOM_MAX[0] + WALL / 2, 1.0, 0.0]]))
    assert sdf[0] > 0 and sdf[1] < 0 and sdf[2] < 0
    np.testing.assert_array_equal(fcls, [1, 1, 1])


def test_closed_scene_of_procedural_parts():
    """A room with closed procedural objects (~30k triangles): every part closed and trusted; exact answers."""
    m, cls = benchmark_mesh_scene()
    room = Mesh(m.vertices, m.faces[cls == 1])
    ball, ring = (-2.0, 1.5, -2.0), (2.0, 1.0, 2.0)
    scene = merge_meshes([room, icosphere(5, 1.0, ball), torus_mesh(1.0, 0.35, 96, 48, center=ring)])
    f = MeshField(scene.vertices, scene.faces)
    assert f.closed and f.n_closed_components == f.n_trusted_components == 4
    p = RNG.uniform(ROOM_MIN - 0.5, ROOM_MAX + 0.5, (4000, 3))
    sdf, _ = f.evaluate(p)
    np.testing.assert_allclose(np.abs(sdf[:40]), brute_distance(scene.vertices, scene.faces, p[:40]), atol=1e-12)
    q = p - ring
    solid = (
        (np.linalg.norm(p - ball, axis=1) < 0.98)
        | (np.hypot(np.hypot(q[:, 0], q[:, 2]) - 1.0, q[:, 1]) < 0.33)
        | (box_sdf(p, ROOM_MIN - WALL, ROOM_MAX + WALL) < 0) & (box_sdf(p, ROOM_MIN, ROOM_MAX) > 0)
    )
    free = (
        (np.linalg.norm(p - ball, axis=1) > 1.0)
        & (np.hypot(np.hypot(q[:, 0], q[:, 2]) - 1.0, q[:, 1]) > 0.35)
        & ((box_sdf(p, ROOM_MIN, ROOM_MAX) < 0) | (box_sdf(p, ROOM_MIN - WALL, ROOM_MAX + WALL) > 0))
    )
    assert solid.sum() > 100 and free.sum() > 1000
    assert np.all(sdf[solid] < 0) and np.all(sdf[free] > 0)


def test_sample_meshes_distances_and_signs():
    for name, closed in (("fandisk.obj", True), ("featuretype.STL", True), ("teapot.stl", False)):
        mm = read_mesh(sample_mesh_path(name))
        f = MeshField(mm.vertices, mm.faces)
        assert f.closed == closed, name
        p = RNG.uniform(f.bounds_min, f.bounds_max, (30, 3))
        d = brute_distance(f_v := mm.vertices, mm.faces, p)
        sdf, _ = f.evaluate(p)
        np.testing.assert_allclose(np.abs(sdf), d, atol=1e-12)
        if closed:  # pseudonormal sign agrees with the exact winding number away from the surface
            w = brute_winding(f_v, mm.faces, p)
            clear = d > 1e-3
            np.testing.assert_array_equal(sdf[clear] < 0, w[clear] >= 0.5)


def test_sibling_groups_match_brute_force_and_shuffled_order():
    """Points ordered like the compiler's cells (8 children of a parent in a row) share a
    candidate search; results equal brute force and the same points in shuffled order."""
    m = merge_meshes([icosphere(3, 1.0), torus_mesh(0.6, 0.15, 32, 16, center=(2.5, 0.0, 0.0))])
    f = MeshField(m.vertices, m.faces)
    parents = np.concatenate([RNG.normal(size=(150, 3)), RNG.uniform((1.6, -0.4, -1.0), (3.4, 0.4, 1.0), (150, 3))])
    parents[:150] /= np.linalg.norm(parents[:150], axis=1, keepdims=True)  # on the sphere
    offsets = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float) * 0.01
    p = (parents[:, None, :] + offsets[None]).reshape(-1, 3)
    for cap in (None, 0.05):
        sdf, cls = f.evaluate(p, cap)
        d = brute_distance(m.vertices, m.faces, p)
        expect = d if cap is None else np.minimum(d, cap)
        np.testing.assert_allclose(np.abs(sdf), expect, rtol=0, atol=1e-12)
        perm = RNG.permutation(len(p))
        s2, c2 = f.evaluate(p[perm], cap)
        np.testing.assert_array_equal(s2, sdf[perm])
        np.testing.assert_array_equal(c2, cls[perm])
    r = np.linalg.norm(p, axis=1)
    sph = (np.arange(len(p)) < 1200) & (np.abs(r - 1.0) > 0.02)
    np.testing.assert_array_equal(sdf[sph] < 0, r[sph] < 1.0)


def test_overlapping_nested_and_inverted_closed_parts():
    """auto trusts a closed part's pseudonormal only where the other parts allow it; the rest
    (parts inside or crossing another solid, a lone inverted part) follow the winding number."""
    big = box_mesh((-1, -1, -1), (1, 1, 1))
    small = box_mesh((-0.3, -0.3, -0.3), (0.3, 0.3, 0.3))  # a solid inside a solid
    cross = box_mesh((0.5, -0.5, -0.5), (1.8, 0.5, 0.5))  # pokes out of the big box
    far = icosphere(2, 0.4, (4.0, 0.0, 0.0))  # alone: trusted
    m = merge_meshes([big, small, cross, far])
    f = MeshField(m.vertices, m.faces)
    assert f.closed and f.n_components == 4 and f.n_trusted_components < 4
    p = RNG.uniform((-2, -2, -2), (5, 2, 2), (3000, 3))
    d = brute_distance(m.vertices, m.faces, p)
    w = brute_winding(m.vertices, m.faces, p)
    sdf, _ = f.evaluate(p)
    np.testing.assert_allclose(np.abs(sdf), d, atol=1e-12)
    clear = np.abs(w - 0.5) > 0.05
    np.testing.assert_array_equal(sdf[clear] < 0, w[clear] >= 0.5)
    inv = Mesh(big.vertices, big.faces[:, ::-1].copy())  # a void in nothing
    fi = MeshField(inv.vertices, inv.faces)
    assert fi.closed and fi.n_trusted_components == 0
    si, _ = fi.evaluate(p)
    assert np.all(si >= 0)
