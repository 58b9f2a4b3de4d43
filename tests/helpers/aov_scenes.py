"""Small scenes with Mitsuba's ``aov`` integrator, written by the tests that use them."""

AOV_SCENE = """<scene version="3.0.0">
<integrator type="aov"><string name="aovs" value="{aovs}"/>{inner}</integrator>
<sensor type="perspective"><film type="hdrfilm"><integer name="width" value="{width}"/>
<integer name="height" value="{height}"/></film>
<sampler type="independent"><integer name="sample_count" value="{spp}"/></sampler>
<transform name="to_world"><lookat origin="0,1,5" target="0,0,0" up="0,1,0"/></transform></sensor>
<shape type="sphere"><bsdf type="diffuse"><rgb name="reflectance" value="0.2,0.5,0.7"/></bsdf></shape>
<shape type="{second}"><transform name="to_world"><scale value="0.5"/><translate x="2"/></transform>
<bsdf type="roughconductor"/></shape>
<shape type="rectangle"><transform name="to_world"><scale value="3"/><translate z="-1"/></transform>
<bsdf type="plastic"><rgb name="diffuse_reflectance" value="0.8,0.3,0.1"/></bsdf></shape>
<shape type="rectangle"><transform name="to_world"><scale value="0.5"/><rotate x="1" angle="90"/>
<translate y="3"/></transform><emitter type="area"><rgb name="radiance" value="20"/></emitter></shape>
{ambient}</scene>"""
AMBIENT = '<emitter type="constant"><rgb name="radiance" value="0.1"/></emitter>'

EVERY_AOV = ("dd.y:depth,nn:sh_normal,a:albedo,p:prim_index,pos:position,uv:uv,g:geo_normal,"
             "du:dp_du,dv:dp_dv,dx:duv_dx,dy:duv_dy")


def aov_scene(path, aovs=EVERY_AOV, inner='<integrator type="path" name="image"/>', width=16, height=12, spp=16,
              second="cube", ambient=AMBIENT):
    """Write the scene to ``path``; returns it as a str."""
    path.write_text(AOV_SCENE.format(aovs=aovs, inner=inner, width=width, height=height, spp=spp, second=second,
                                     ambient=ambient))
    return str(path)
