"""Every integer tag of the tracer, in one place (no JAX here: the host builders and ``farm`` may
import it).

Tables dispatch on these tags (a ``kind`` column and a static tuple of the kinds present, so
absent kinds are never traced). Each family is a namespace of plain ints: JAX treats them as
weakly typed Python scalars, which an ``enum.IntEnum`` would not be.
"""

__all__ = ["SurfaceKind", "EmitterKind", "TextureKind", "BitmapFilter", "WrapMode", "FilterKind", "Projection",
           "BsdfKind", "Microfacet", "Perturbation"]


class SurfaceKind:
    """What a primitive, or the shape an area emitter is attached to, is."""

    MESH, SPHERE, DISK, CYLINDER, RECTANGLE, LINEAR_CURVE, BSPLINE_CURVE, SDF_VOXEL = range(8)
    CURVES = (LINEAR_CURVE, BSPLINE_CURVE)  # a segment of Mitsuba's curve shapes (tracer.shapes.curves)
    # SDF_VOXEL: a voxel of an ``sdfgrid`` that the surface crosses (tracer.shapes.sdfgrid)
    ANALYTIC = (SPHERE, DISK, CYLINDER, *CURVES, SDF_VOXEL)  # intersected as themselves, not as triangles
    # RECTANGLE: intersected as its two triangles, but an area light on it is sampled through its
    # square parametrisation, as Mitsuba's ``Rectangle::sample_position``.


class EmitterKind:
    """Mitsuba's emitter plugins."""

    AREA, POINT, SPOT, DIRECTIONAL, CONSTANT, ENVMAP, PROJECTOR = range(7)
    DELTA = (POINT, SPOT, DIRECTIONAL, PROJECTOR)   # a single position or direction: never hit by a ray
    ENVIRONMENT = (CONSTANT, ENVMAP)     # what rays that leave the scene see (one per scene)


class TextureKind:
    CONSTANT, CHECKERBOARD, BITMAP, MESH_ATTRIBUTE = range(4)


class BitmapFilter:
    NEAREST, BILINEAR = range(2)


class WrapMode:
    REPEAT, MIRROR, CLAMP = range(3)


class FilterKind:
    """Mitsuba's reconstruction filters as the film splats them: box, tent and gaussian in closed
    form; mitchell, catmullrom (mitchell's B = 0, C = 1/2) and lanczos from their table."""

    BOX, TENT, GAUSSIAN, MITCHELL, CATMULLROM, LANCZOS = range(6)
    TABULATED = (MITCHELL, CATMULLROM, LANCZOS)


class Projection:
    """Mitsuba's sensors: perspective (thinlens is perspective with an aperture) and orthographic."""

    PERSPECTIVE, ORTHOGRAPHIC = range(2)


class BsdfKind:
    """Mitsuba's BSDF plugins that are leaves of a material (BLACK: the back of a one-sided
    material, which reflects nothing; NULL: Mitsuba's ``null``, which lets rays pass), and
    COMPOSITE: the root of a material made of leaves (``blendbsdf``, ``mask``; tracer.bsdfs.layers);
    PPLASTIC and POLARIZER: the polarized plugins as Mitsuba's RGB variants render them."""

    BLACK, DIFFUSE, CONDUCTOR, ROUGHCONDUCTOR, DIELECTRIC, ROUGHDIELECTRIC, THINDIELECTRIC, PLASTIC, \
        ROUGHPLASTIC, PRINCIPLED, PRINCIPLEDTHIN, NULL, COMPOSITE, PPLASTIC, POLARIZER = range(15)
    NAMES = ("black", "diffuse", "conductor", "roughconductor", "dielectric", "roughdielectric",
             "thindielectric", "plastic", "roughplastic", "principled", "principledthin", "null", "composite",
             "pplastic", "polarizer")
    # Kinds with a lobe that is not a Dirac delta (Mitsuba's BSDFFlags::Smooth): next-event
    # estimation applies to them. (The 'smooth' conductor and dielectric plugins are delta-only.)
    WITH_NONDELTA_LOBE = (DIFFUSE, ROUGHCONDUCTOR, ROUGHDIELECTRIC, PLASTIC, ROUGHPLASTIC, PRINCIPLED, PRINCIPLEDTHIN,
                          PPLASTIC)
    ROUGH = (ROUGHCONDUCTOR, ROUGHDIELECTRIC, ROUGHPLASTIC, PPLASTIC)  # with a microfacet distribution
    DIELECTRICS = (DIELECTRIC, ROUGHDIELECTRIC, THINDIELECTRIC)  # transmissive: the same on both sides
    PLASTICS = (PLASTIC, ROUGHPLASTIC)
    # With a diffuse 'reflectance' (the principled kinds' base_color: Mitsuba's diffuse reflectance).
    WITH_DIFFUSE = (DIFFUSE, PLASTIC, ROUGHPLASTIC, PRINCIPLED, PRINCIPLEDTHIN, PPLASTIC)
    # With a float relative IOR (the ``eta`` column's first row).
    WITH_ETA = (DIELECTRIC, ROUGHDIELECTRIC, THINDIELECTRIC, PLASTIC, ROUGHPLASTIC, PPLASTIC)
    # Leaves a ray goes straight through (Mitsuba's BSDFFlags::Null), with a weight for polarizers.
    PASS_THROUGH = (NULL, POLARIZER)
    PRINCIPLEDS = (PRINCIPLED, PRINCIPLEDTHIN)  # Burley's model: parameters in ``Materials.principled``
    # The kinds that read each texture-id column of ``Materials``: another kind's id there is never
    # read (the loader leaves it at texture 0, whatever that is).
    TEXTURE_READERS = {"reflectance": WITH_DIFFUSE,
                       "specular_reflectance": (CONDUCTOR, ROUGHCONDUCTOR, *DIELECTRICS, *PLASTICS, PPLASTIC),
                       "specular_transmittance": (*DIELECTRICS, POLARIZER),
                       "alpha_u": ROUGH, "alpha_v": ROUGH}


class Microfacet:
    """Microfacet normal distributions."""

    BECKMANN, GGX = range(2)


class Perturbation:
    """How a leaf BSDF's shading frame is perturbed: Mitsuba's ``normalmap`` (a tangent-space normal
    from an RGB texture) and ``bumpmap`` (the gradient of a height texture) wrap the BSDFs below them."""

    NONE, NORMALMAP, BUMPMAP = range(3)
